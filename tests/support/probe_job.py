"""A job that proves it never ran twice at once.

Run as a sloth job: ``python probe_job.py DIR [--hold S] [--hold-first S] [--fail-until N] [--exit-code C] [--detach 1]``.
On start it takes a non-blocking flock on DIR/<job>.lock (a collision is
appended to DIR/collisions), appends "job attempt token pid start" to
DIR/starts, holds for a while (``--hold-first`` on its first start only), then exits (failing while attempt < N).
On the way out it appends "job attempt token pid end" to DIR/ends (success) or
DIR/fails (a deliberate failure), so run intervals can be checked for overlap.

``--detach 1``: the job's process double-forks a grandchild that calls
setsid (it leaves the job's process group and tree) and does all of the
above, while the job's process waits for it and exits with its status. If
the job's process is killed, the grandchild lives on: only a complete tree
kill (by the run's token) stops it from overlapping a retry. The start
record names the job's own pid (the one a kill of "the job" hits).
"""

import fcntl
import os
import sys
import time


def main() -> int:
    d = sys.argv[1]
    args = dict(zip(sys.argv[2::2], sys.argv[3::2]))
    if args.get("--detach"):
        return detached(d, args)
    return work(d, args, os.getpid())


def detached(d: str, args: dict[str, str]) -> int:
    root = os.getpid()
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        os.setsid()
        if os.fork() > 0:
            os._exit(0)
        os.close(r)
        code = work(d, args, root)
        os.write(w, bytes([code]))
        os._exit(code)
    os.close(w)
    os.waitpid(child, 0)
    got = os.read(r, 1)  # the grandchild's status, or EOF if it died
    return got[0] if got else 70


def work(d: str, args: dict[str, str], pid: int) -> int:
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
        f.write(f"{job} {attempt} {token} {pid} {time.time():.3f}\n")
        f.flush()
    hold = float(args.get("--hold-first", args.get("--hold", "0"))) if first else float(args.get("--hold", "0"))
    time.sleep(hold)
    failing = attempt < int(args.get("--fail-until", "0"))
    with open(os.path.join(d, "fails" if failing else "ends"), "a") as f:
        f.write(f"{job} {attempt} {token} {os.getpid()} {time.time():.3f}\n")
    return int(args.get("--exit-code", "1")) if failing else 0


if __name__ == "__main__":
    sys.exit(main())
