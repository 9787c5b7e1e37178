"""A job that proves it never ran twice at once.

Run as a sloth job: ``python probe_job.py DIR [--hold S] [--hold-first S] [--fail-until N] [--exit-code C]``.
On start it takes a non-blocking flock on DIR/<job>.lock (a collision is
appended to DIR/collisions), appends "job attempt token pid start" to
DIR/starts, holds for a while (``--hold-first`` on its first start only), then exits (failing while attempt < N).
On the way out it appends "job attempt token pid end" to DIR/ends (success) or
DIR/fails (a deliberate failure), so run intervals can be checked for overlap.
"""

import fcntl
import os
import sys
import time


def main() -> int:
    d = sys.argv[1]
    args = dict(zip(sys.argv[2::2], sys.argv[3::2]))
    job = os.environ.get("SLOTH_JOB_ID", "?")
    attempt = int(os.environ.get("SLOTH_JOB_ATTEMPT", "0"))
    token = os.environ.get("SLOTH_JOB_TOKEN", "?")
    lock = open(os.path.join(d, f"{job}.lock"), "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        with open(os.path.join(d, "collisions"), "a") as f:
            f.write(f"{job} {attempt} {token} {os.getpid()}\n")
    starts = os.path.join(d, "starts")
    try:
        with open(starts) as f:
            first = not any(ln.split()[0] == job for ln in f if ln.strip())
    except FileNotFoundError:
        first = True
    with open(starts, "a") as f:
        f.write(f"{job} {attempt} {token} {os.getpid()} {time.time():.3f}\n")
        f.flush()
    hold = float(args.get("--hold-first", args.get("--hold", "0"))) if first else float(args.get("--hold", "0"))
    time.sleep(hold)
    failing = attempt < int(args.get("--fail-until", "0"))
    with open(os.path.join(d, "fails" if failing else "ends"), "a") as f:
        f.write(f"{job} {attempt} {token} {os.getpid()} {time.time():.3f}\n")
    return int(args.get("--exit-code", "1")) if failing else 0


if __name__ == "__main__":
    sys.exit(main())
