"""The daemon dormant: what its process runs after ``dormant_after_s`` with
nothing to do (docs/idle.md, "Dormant").

The daemon execs this file by path under ``python -I -S`` (renewal.execute):
no ``site``, no sloth module, only what the standard library's core loads,
about 9 MB where the daemon at rest holds ~22. Same process (exec keeps the
pid: the service manager's main pid, the lock file's), and it keeps the two
descriptors the daemon handed over, the listening socket and the
single-instance lock: a second daemon cannot start, a client's connection
waits in the socket's queue. It touches neither; it only waits, and execs
the daemon again (the handover still in its environment, as a renewal's) at
the first of:

* a connection waiting on the socket: the daemon accepts and serves it;
* SIGTERM, SIGINT or SIGHUP: left pending across the exec (blocked), for the
  daemon's own handlers (a stop, a reload) as at any renewal;
* the wake time, a schedule's next slot or a dead-man deadline less a lead
  for the start, or with no such timer the idle exit's time (idle_exit_s:
  the woken daemon leaves at its first look): read against the wall clock
  at every look, so a machine that slept past it wakes on resume;
* the queue's files changed: another process of this user wrote the SQLite
  file (a library's enqueue, `sloth` run against the file), which a daemon
  would have seen at its next look;
* the wall clock set back (against the monotonic clock): a daemon brings its
  schedules back to a clock put right after it was set ahead
  (Scheduler.clock_jumped); the wake time, on the wrong date, would not come;
* the local zone's file changed (`timedatectl set-timezone`): a daemon moves
  its local-time schedules to the new zone (Scheduler.zone_check), whose
  slot may come before the wake time;
* the machine slept (Linux's boot time ran on while the monotonic clock did
  not): a daemon records each sleep (the timeline, `status`), from the
  clocks as the daemon before it last read them (renewal.Handover.clock).

It looks every ``--look-s`` (at most, less when the wake time is nearer),
and pings systemd's watchdog (``WATCHDOG_USEC``) as the daemon does: a few
wake-ups a minute. The reason it woke goes to the daemon in
``SLOTH_DORMANT_WOKE`` (logged there). If the exec fails the process ends
(said on stderr): the next command starts a daemon, as after a crash.
"""

import os
import select
import signal
import sys
import time

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
WOKE = "SLOTH_DORMANT_WOKE"
BY_TIME = "the wake time (a schedule's slot, a dead-man deadline, the idle exit)"
STEP_BACK_S = 2.0  # the wall clock this much behind where the monotonic one says it should be: set back
SLEPT_S = 2.0  # the boot time this much ahead of the monotonic clock: the machine slept (clock.JumpDetector's)
BOOTTIME = getattr(time, "CLOCK_BOOTTIME", None)  # Linux


class Orders:
    """What the daemon told this process (argv): the socket to watch, when
    to wake, the files to watch, how often to look, and the daemon's argv."""

    def __init__(self, argv: "list[str]") -> None:
        self.listen_fd, self.wake_at, self.look_s = -1, None, 30.0
        self.watch: "list[str]" = []
        self.seen: "list[object]" = []  # each watched file as the daemon left it (its stamp, or None)
        self.zone: "list[str]" = []  # the local zone's file (one at most), and as the daemon left it
        self.zone_seen: "list[object]" = []
        self.clocks: "tuple | None" = None  # wall, awake, boot time as the daemon last read them ("-": none)
        i = 0
        while i < len(argv) and argv[i] != "--":
            key, value = argv[i], argv[i + 1]
            if key == "--listen":
                self.listen_fd = int(value)
            elif key == "--wake-at":
                self.wake_at = float(value)
            elif key == "--look-s":
                self.look_s = max(float(value), 0.05)
            elif key == "--watch":
                self.watch.append(value)
                self.seen.append(None)
            elif key == "--seen":  # of the --watch before it: "ino,size,mtime_ns" ("-": none)
                self.seen[-1] = stamp_of(value)
            elif key == "--zone":
                self.zone, self.zone_seen = [value], [None]
            elif key == "--clocks":
                wall, awake, boot = value.split(",")
                self.clocks = (float(wall), float(awake), None if boot == "-" else float(boot))
            elif key == "--zone-seen":  # of the --zone before it
                if not self.zone:
                    raise ValueError("--zone-seen without --zone")
                self.zone_seen = [stamp_of(value)]
            else:
                raise ValueError("unknown option " + key)
            i += 2
        self.daemon = argv[i + 1:]
        if self.listen_fd < 0 or not self.daemon:
            raise ValueError("--listen FD and -- DAEMON ARGV are needed")


def stamp_of(value: str) -> "tuple | None":
    """A stamp from its --seen form (seen_arg)."""
    return None if value == "-" else tuple(int(x) for x in value.split(","))


def stamps(paths: "list[str]") -> tuple:
    """What would change if another process wrote one of ``paths``. An
    empty file is no file: a reader of the queue (`sloth ls` while no daemon
    answers) makes an empty WAL, and reading is no work for a daemon."""
    out: list = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            out.append(None)
            continue
        out.append((st.st_ino, st.st_size, st.st_mtime_ns) if st.st_size else None)
    return tuple(out)


class Watchdog:
    """systemd's watchdog, pinged as the daemon pings it (sdnotify.py)."""

    def __init__(self, env: "dict[str, str]") -> None:
        raw, usec = env.get("NOTIFY_SOCKET") or "", env.get("WATCHDOG_USEC") or ""
        pid = env.get("WATCHDOG_PID") or ""
        self.address = ("\0" + raw[1:]) if raw.startswith("@") else raw if raw.startswith("/") else None
        self.every_s = None
        if self.address and usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid())):
            self.every_s = int(usec) / 2e6
        self.next_at = time.monotonic()

    def ping_due(self) -> None:
        if self.every_s is None or self.address is None or time.monotonic() < self.next_at:
            return
        import socket  # only under a watchdog

        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
                s.sendto(b"WATCHDOG=1", self.address)
        except OSError:
            pass  # as the daemon's: a lost ping must not end us; systemd's restart is the point
        self.next_at = time.monotonic() + self.every_s

    def wait_s(self) -> float:
        return float("inf") if self.every_s is None else max(self.next_at - time.monotonic(), 0.0)


def seen_arg(stamp: object) -> str:
    """A stamp as --seen takes it."""
    return "-" if stamp is None else ",".join(str(x) for x in stamp)  # type: ignore[attr-defined]


def boot_time() -> float:
    """The clock that counts a sleep (0 where there is none: no sleep is seen)."""
    return 0.0 if BOOTTIME is None else time.clock_gettime(BOOTTIME)


def wait(plan: Orders, heard: "list[int]", wakeup: int, dog: Watchdog, *, clock=time.time,
         mono=time.monotonic, boot=boot_time) -> str:
    """Until something needs the daemon; returns what, in words. The files
    are compared with what the daemon left (a write between its exit and
    this process's start is one too)."""
    seen, zone = tuple(plan.seen), tuple(plan.zone_seen)
    offset, asleep = clock() - mono(), boot() - mono()
    if plan.clocks is not None:  # as the daemon last read them: a step or a sleep before this process's start counts
        wall, awake, total = plan.clocks
        offset = wall - awake
        if total is not None and BOOTTIME is not None:
            asleep = total - awake
    poller = select.poll()  # not select(): a descriptor of 1024 or more would end this process
    poller.register(plan.listen_fd, select.POLLIN)  # an error or a hang-up on it comes too: the daemon judges it
    poller.register(wakeup, select.POLLIN)
    while True:
        dog.ping_due()
        if heard:
            return "signal " + signal.Signals(heard[0]).name
        now = clock()
        if now - mono() < offset - STEP_BACK_S:
            return "the wall clock was set back"
        if boot() - mono() > asleep + SLEPT_S:
            return "the machine slept"
        if plan.wake_at is not None and now >= plan.wake_at:
            return BY_TIME
        timeout = min(plan.look_s, dog.wait_s(), float("inf") if plan.wake_at is None else plan.wake_at - now)
        try:
            ready = [fd for fd, _ in poller.poll(max(timeout, 0.0) * 1000)]
        except InterruptedError:  # a signal: its handler noted it (PEP 475 retries; older kernels' paths)
            ready = []
        if plan.listen_fd in ready:
            return "a connection"
        if wakeup in ready:
            try:
                os.read(wakeup, 64)
            except BlockingIOError:
                pass
            continue
        if stamps(plan.watch) != seen:
            return "the queue's files changed (another process wrote them)"
        if stamps(plan.zone) != zone:
            return "the local time zone changed"


def main(argv: "list[str]") -> int:
    try:
        plan = Orders(argv)
    except (ValueError, IndexError) as e:
        sys.stderr.write("sloth: dormant: bad arguments (%s): %r\n" % (e, argv))
        return 2
    heard: "list[int]" = []

    def hear(signum, frame):
        heard.append(signum)

    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    for sig in SIGNALS:
        signal.signal(sig, hear)
    signal.set_wakeup_fd(w)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)  # blocked across the exec that brought us here
    why = wait(plan, heard, r, Watchdog(dict(os.environ)))
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    for signum in heard:  # one thread, the signal blocked: pending across the exec, for the daemon's handler
        os.kill(os.getpid(), signum)
    os.close(r)
    os.close(w)
    env = dict(os.environ)
    env[WOKE] = why
    try:
        os.execve(plan.daemon[0], plan.daemon, env)
    except OSError as e:
        sys.stderr.write("sloth: dormant: cannot exec %s: %s\n" % (plan.daemon[0], e))
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
