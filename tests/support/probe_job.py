"""A job that proves it never ran twice at once.

Run as a sloth job: ``python probe_job.py DIR [--hold S] [--hold-first S] [--fail-until N] [--exit-code C] [--detach 1]
[--tick S] [--lock 0]``.
On start it takes a non-blocking flock on DIR/<job>.lock (a collision is
appended to DIR/collisions), appends "job attempt token pid start" to
DIR/starts and, on Linux, "job attempt token pid boot" to DIR/spawned, where
boot is when the job's process was forked, in seconds of CLOCK_BOOTTIME
(/proc/PID/stat, in 10 ms ticks, rounded down): before the interpreter
started, so a start can be compared with when a cancel was answered; holds for a while (``--hold-first`` on its first start only), then exits (failing while attempt < N).
On the way out it appends "job attempt token pid end" to DIR/ends (success) or
DIR/fails (a deliberate failure), so run intervals can be checked for overlap,
and exits at once (``os._exit``, no interpreter teardown): a run with an end
line has finished, short of a few microseconds, so one that runs again was
re-run after it finished (the chaos soak counts those).

``--tick S``: while it holds, it appends "job attempt token pid time" to
DIR/ticks every S seconds: a run killed or frozen (SIGSTOP) stops ticking,
so its last tick bounds when it last ran. ``--lock 0``: no flock (a frozen
run keeps holding one, as a suspended machine's job keeps its locks).

``--res NAME,...``: for each token of each named resource the run was
given (``SLOTH_<NAME>``, comma-separated), a non-blocking flock on
DIR/res-NAME-TOKEN.lock; one already held by another live run is appended
to DIR/token_collisions ("job attempt token pid NAME:TOKEN"): a token given
twice. ``--lane-slots LANE:C:N``: N of the C flocks DIR/slot-LANE-I.lock,
non-blocking; fewer than N free is appended to DIR/slot_collisions: the
lane ran more than C slots at once. Locks are held until the process dies
(a SIGKILL releases them too), so only runs alive at once collide.
``--mark M``: appends "job attempt token M" to DIR/marks (which command
ran: an edit's mark).

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
        if args.get("--lock", "1") != "0":
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        with open(os.path.join(d, "collisions"), "a") as f:
            f.write(f"{job} {attempt} {token} {os.getpid()}\n")
    held_locks = take_locks(d, args, f"{job} {attempt} {token} {os.getpid()}")
    if "--mark" in args:
        with open(os.path.join(d, "marks"), "a") as f:
            f.write(f"{job} {attempt} {token} {args['--mark']}\n")
    starts = os.path.join(d, "starts")
    try:
        with open(starts) as f:
            first = not any(ln.split()[0] == job for ln in f if ln.strip())
    except FileNotFoundError:
        first = True
    with open(starts, "a") as f:
        f.write(f"{job} {attempt} {token} {pid} {time.time():.3f}\n")
        f.flush()
    boot = forked_at(pid)
    if boot is not None:
        with open(os.path.join(d, "spawned"), "a") as f:
            f.write(f"{job} {attempt} {token} {pid} {boot:.2f}\n")
    hold = float(args.get("--hold-first", args.get("--hold", "0"))) if first else float(args.get("--hold", "0"))
    held(d, hold, float(args.get("--tick", "0")), f"{job} {attempt} {token} {pid}")
    failing = attempt < int(args.get("--fail-until", "0"))
    del held_locks  # held to here: the work is done
    with open(os.path.join(d, "fails" if failing else "ends"), "a") as f:
        f.write(f"{job} {attempt} {token} {os.getpid()} {time.time():.3f}\n")
    return int(args.get("--exit-code", "1")) if failing else 0


def take_locks(d: str, args: dict[str, str], who: str) -> list[object]:
    """The resource-token and lane-slot flocks of ``--res`` / ``--lane-slots``;
    each one another live run holds is recorded as a collision."""
    held: list[object] = []
    for name in filter(None, args.get("--res", "").split(",")):
        for tok in filter(None, os.environ.get(f"SLOTH_{name.upper()}", "").split(",")):
            f = open(os.path.join(d, f"res-{name}-{tok}.lock"), "a")
            held.append(f)
            if not try_lock(f):
                with open(os.path.join(d, "token_collisions"), "a") as out:
                    out.write(f"{who} {name}:{tok}\n")
    if "--lane-slots" in args:
        lane, cap, want = args["--lane-slots"].split(":")
        got = 0
        for i in range(int(cap)):
            if got == int(want):
                break
            f = open(os.path.join(d, f"slot-{lane}-{i}.lock"), "a")
            if try_lock(f):
                held.append(f)
                got += 1
            else:
                f.close()
        if got < int(want):
            with open(os.path.join(d, "slot_collisions"), "a") as out:
                out.write(f"{who} {lane}:{got}/{want}of{cap}\n")
    return held


def try_lock(f: object) -> bool:
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # type: ignore[arg-type]
        return True
    except BlockingIOError:
        return False


def forked_at(pid: int) -> float | None:
    """When ``pid`` was forked, in seconds of CLOCK_BOOTTIME (10 ms ticks, rounded down)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None
    return ticks / os.sysconf("SC_CLK_TCK")


def held(d: str, hold: float, tick: float, who: str) -> None:
    """Sleep ``hold`` seconds, appending a tick every ``tick`` seconds."""
    if tick <= 0:
        time.sleep(hold)
        return
    end = time.monotonic() + hold
    with open(os.path.join(d, "ticks"), "a") as f:
        while True:
            f.write(f"{who} {time.time():.3f}\n")
            f.flush()
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(tick, left))


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
