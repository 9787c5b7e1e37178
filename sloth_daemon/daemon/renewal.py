"""At rest, a fresh process: the daemon re-executes itself (docs/idle.md).

A burst of jobs leaves the daemon holding memory it no longer uses: most of
it Python's small-object arenas, each kept whole while one object made
during the burst still lives in it (``malloc_trim`` cannot return those),
and the modules only the burst's paths loaded. Once it is at rest (the
keeper let go, no run in hand, no client, a local queue), has grown
RENEW_GROWTH_KB past what it held when it became ready, and nothing would
be lost by a restart, it stops as for `sloth daemon stop --keep-jobs`
(nothing runs) and ``exec``s a new daemon in the same process: same pid
(the service manager's main pid, the lock file's pid), same listening
socket, same single-instance lock (both descriptors kept across the exec;
a client that connects meanwhile waits in the socket's queue and is served
by the new one), its start time and its timeline row carried over. The
new one starts lean: it connects to no keeper unless one is running (the
next job starts one, as after a let-go).

Nothing is in flight: the queue is closed cleanly before the exec, so the
new daemon finds what any restart finds (a restart loses nothing: the
durability promises, docs/guarantees.md). Leaving is two steps, as an idle
exit's: stop accepting, let connections the loop already accepted start,
look again; anything found, accept again and stay (``give_back`` only).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

from sloth_daemon import config
from sloth_daemon.errors import SlothError
from sloth_daemon.safefile import read_file

log = logging.getLogger("sloth.daemon")
ENV = "SLOTH_RENEWED"  # what the old process hands the new one (taken out of the environment at once)
WOKE = "SLOTH_DORMANT_WOKE"  # what woke the dormant process (dormant.WOKE; taken out with ENV)
RENEW_GROWTH_KB = 1024  # resident growth since ready that is worth a fresh process (a start costs ~0.3 s CPU)
SETTLE_S = 0.05  # after accepting stops: connections already accepted get their task started
# Blocked from the moment the renewal is decided and across the exec (a
# signal mask and pending signals survive it), unblocked by the new daemon
# once its handlers are in place: a stop or reload sent meanwhile is the new
# daemon's to handle (not lost on the old one's drain, nor the default
# action's end of the process).
SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
# config.toml's text goes in the environment up to this size (one variable
# may hold 128 KiB, else the exec fails with E2BIG); a longer one (1 MiB is
# allowed) is read by the new process from the file, found unchanged just before.
HANDED_TEXT_MAX = 64 * 1024


def handed(text: str | None) -> str | None:
    """config.toml's text as the handover carries it (None: too long, read from the file)."""
    return text if text is None or len(text) <= HANDED_TEXT_MAX else None


# What a start reads of sloth's code: the interpreter and the files the exec
# loads first. pip replaces every file of a package it installs (new inodes).
CODE = (sys.executable, Path(__file__).parents[1] / "__init__.py", Path(__file__).with_name("__main__.py"),
        Path(__file__).with_name("main.py"))


@dataclass
class Handover:
    """What the new process takes over from the old one."""
    listen_fd: int
    lock_fd: int
    owned: bool  # the socket was bound by sloth (else its service manager's: never removed)
    started_at: float  # the first process's start (status, metrics)
    up_row: int | None  # its timeline row (machine_log.py), continued
    counted: dict[str, Any]  # its own metrics' counters (metrics_file.DaemonMetrics.counted), continued
    config: str | None = None  # config.toml's text in force (the file may have been edited since)
    woke: str | None = None  # what woke a dormant process (dormant.py), if it was one
    quiet_since: float | None = None  # a dormant one's: since when nothing needed a daemon (idle_exit.py)
    schedules: dict[str, Any] | None = None  # what the schedules saw (Scheduler.saw): a clock set back, a zone changed
    clock: list[float | None] | None = None  # the clocks as last read (ClockWatch.saw): a sleep since is one


def taken(environ: Any = None) -> Handover | None:
    """The handover of a renewed daemon, or None (a daemon started anew).
    Removed from the environment either way: the keeper and jobs never see
    it. Only a handover naming this process is one: exec keeps the pid."""
    env = os.environ if environ is None else environ
    raw = env.pop(ENV, None)
    woke = env.pop(WOKE, None)
    if not raw:
        return None
    try:
        d = json.loads(raw)
        if d.get("pid") != os.getpid():  # as LISTEN_PID: an environment inherited or set by another is not ours
            log.error("renewal: %s is not for this process (pid %d): ignored, starting anew", ENV, os.getpid())
            return None
        counted = d.get("counted")
        return Handover(int(d["listen_fd"]), int(d["lock_fd"]), bool(d["owned"]), float(d["started_at"]),
                        None if d.get("up_row") is None else int(d["up_row"]),
                        counted if isinstance(counted, dict) else {},
                        None if d.get("config") is None else str(d["config"]), woke,
                        None if d.get("quiet_since") is None else float(d["quiet_since"]),
                        d["schedules"] if isinstance(d.get("schedules"), dict) else None,
                        d["clock"] if isinstance(d.get("clock"), list) and len(d["clock"]) == 3 else None)
    except (ValueError, KeyError, TypeError) as e:
        log.error("renewal: cannot read %s=%r (%s); starting anew", ENV, raw, e)
        return None


def resident_kb() -> int | None:
    """This process's resident memory (Linux /proc), or None where it cannot be read."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    except (OSError, ValueError, IndexError):
        return None


def worth_it(ready_kb: int | None) -> bool:
    """Whether a fresh process would hold notably less than this one
    ($SLOTH_RENEW_GROWTH_KB overrides the growth: 0 renews at every rest, a
    huge number never)."""
    now = resident_kb()
    try:
        growth = int(os.environ.get("SLOTH_RENEW_GROWTH_KB") or RENEW_GROWTH_KB)
    except ValueError:
        growth = RENEW_GROWTH_KB
    return ready_kb is not None and now is not None and now - ready_kb >= growth


def _code_mark() -> tuple[tuple[int, int, int, int] | None, ...]:
    marks: list[tuple[int, int, int, int] | None] = []
    for f in CODE:
        try:
            st = os.stat(f)
            marks.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            marks.append(None)
    return tuple(marks)


STARTED_CODE = _code_mark()  # the code this process runs (this module is imported at its start)


def upgraded() -> bool:
    """Whether sloth's code on disk is no longer what this process started with (`pip install -U` under it)."""
    return _code_mark() != STARTED_CODE


def import_late(name: str) -> ModuleType:
    """One of sloth's modules imported after the start (a request family at
    its first request: handlers.LAZY). Once sloth was upgraded under the
    daemon it is refused, not the new version's module run beside the old
    one's others on a queue the new version's migrations never saw."""
    if name not in sys.modules and upgraded():
        raise SlothError(f"sloth was upgraded under this daemon (pid {os.getpid()}), which does not load the "
                         f"new version's {name.rsplit('.', 1)[-1]} beside its own code",
                         hint="Run `sloth daemon restart` (running jobs keep running): the new version runs whole.")
    return importlib.import_module(name)


def same_daemon(settings: config.Settings) -> tuple[str | None, str | None]:
    """Whether the process the exec would start is this daemon: sloth's code
    as this process loaded it (not a version installed under it since), and
    config.toml as in force (an edit not reloaded is the user's to apply;
    a broken one would end the new process at its start). Returns why not
    (or None) and config.toml's text, handed to the new process so that it
    starts on exactly the settings in force whatever the file says by then."""
    if upgraded():
        return ("sloth's code changed on disk since this daemon started (an upgrade?): "
                "`sloth daemon restart` runs the new one", None)
    path = settings.file
    if path is None:
        return None, None
    try:
        text = read_file(path, config.CONFIG_MAX_BYTES, follow=True).decode("utf-8")
    except FileNotFoundError:
        text = ""  # the defaults
    except (OSError, UnicodeDecodeError) as e:
        return f"cannot read {path} ({e}); the daemon keeps the settings it has", None
    try:
        now = config.load(path, text=text)
    except SlothError as e:
        return f"{e.message}; the daemon keeps the settings it has", None
    if changed := config.changes(settings, now):
        return f"{path} was edited and not reloaded ({'; '.join(changed)}): `sloth daemon reload` applies it", None
    return None, text


class HeldSignals:
    """The stop and reload signals from the moment the renewal is decided to
    the exec. Blocked in the main thread they stay pending across the exec,
    for the new daemon's handlers. But a signal sent to the process goes to
    any thread that does not block it (a thread of the default pool lives on
    after a metrics file's write or a notification), and asyncio's handler
    then ran on a daemon already stopping to renew: the stop was lost. So
    the loop's handlers are replaced by one that notes what came: a stop
    heard calls the exec off (the process ends, as asked); a reload heard is
    sent on to the new process (blocked here: pending across the exec)."""

    def __init__(self, loop: Any) -> None:
        self.heard: list[signal.Signals] = []
        signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        for sig in SIGNALS:
            loop.remove_signal_handler(sig)
            signal.signal(sig, self._hear)

    def _hear(self, signum: int, frame: FrameType | None) -> None:
        self.heard.append(signal.Signals(signum))

    def stop(self) -> str | None:
        """The stop signal heard since the renewal was decided, if one was."""
        return next((s.name for s in self.heard if s is not signal.SIGHUP), None)

    def pass_on(self) -> None:
        """Just before the exec: a reload heard is left pending for the new daemon."""
        if signal.SIGHUP in self.heard:
            signal.pthread_kill(threading.get_ident(), signal.SIGHUP)  # blocked in this thread: kept across the exec


@dataclass
class Dormancy:
    """What the dormant process (dormant.py) waits for before it execs the daemon."""
    wake_at: float | None  # wall clock (None: a command or a signal only)
    quiet_since: float  # since when nothing needed a daemon (wall clock), for the woken daemon's idle exit
    look_s: float  # how often it looks at the clock and at ``watch``
    watch: tuple[str, ...]  # files another process writes to queue work (the SQLite file and its WAL)
    seen: tuple[object, ...] | None = None  # their stamps at the daemon's last look (sealed), else at the exec
    zone: str | None = None  # the local zone's file (schedules on local time move with it)

    def seal(self) -> None:
        """The watched files as they are now: a write after this wakes the dormant process."""
        from sloth_daemon.daemon import dormant

        self.seen = dormant.stamps(list(self.watch))

    def argv(self, listen_fd: int, daemon: list[str], clock: list[float | None] | None = None) -> list[str]:
        """``python -I -S dormant.py ...``: no site, no sloth module (dormant.py's docstring).
        ``clock``: the clocks as the daemon last read them (ClockWatch.saw)."""
        out = [sys.executable, "-I", "-S", str(Path(__file__).with_name("dormant.py")),
               "--listen", str(listen_fd), "--look-s", repr(self.look_s)]
        if clock is not None:
            out += ["--clocks", ",".join("-" if x is None else repr(x) for x in clock)]
        if self.wake_at is not None:
            out += ["--wake-at", repr(self.wake_at)]
        from sloth_daemon.daemon import dormant  # the standard library only: its own process imports nothing

        if self.seen is None:
            self.seal()
        for f, stamp in zip(self.watch, self.seen or (), strict=True):  # as this process leaves them
            out += ["--watch", f, "--seen", dormant.seen_arg(stamp)]
        if self.zone is not None:  # as it is now (the schedules looked at it a clock check ago at most)
            out += ["--zone", self.zone, "--zone-seen", dormant.seen_arg(dormant.stamps([self.zone])[0])]
        return out + ["--", *daemon]


def execute(listener: Any, lock_fd: int, held: HeldSignals, *, owned: bool, started_at: float,
            up_row: int | None, config_text: str | None,
            counted: dict[str, Any] | None = None, dormancy: Dormancy | None = None,
            schedules: dict[str, Any] | None = None, clock: list[float | None] | None = None) -> None:
    """Replace this process by a new daemon that takes over ``listener`` and
    the lock (``dormancy``: by the dormant process, which execs that daemon
    when something needs it). Returns only if the exec failed (the caller
    exits: the next command, or the service manager, starts the next daemon)."""
    listen_fd = listener.fileno()
    os.set_inheritable(listen_fd, True)
    os.set_inheritable(lock_fd, True)
    handover = {"pid": os.getpid(), "listen_fd": listen_fd, "lock_fd": lock_fd, "owned": owned,
                "started_at": started_at, "up_row": up_row, "counted": counted or {},
                "config": handed(config_text), "schedules": schedules, "clock": clock,
                "quiet_since": dormancy.quiet_since if dormancy is not None else None}
    env = dict(os.environ, **{ENV: json.dumps(handover)})
    flags: list[str] = subprocess._args_from_interpreter_flags()  # type: ignore[attr-defined]  # -X, -W ...
    argv = [sys.executable, *flags, *optimized(), "-m", "sloth_daemon.daemon", "run"]
    if dormancy is not None:
        argv = dormancy.argv(listen_fd, argv, clock)
    logging.shutdown()
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)  # already, since the renewal was decided
    held.pass_on()
    try:
        # `-m` puts the working directory first on sys.path: from the daemon's
        # (where `sloth daemon run` was typed) a `sloth_daemon` folder there
        # would be run in its place. Every `-m` start sloth makes runs from /
        # (the launcher's, the keeper's); every path it uses is absolute.
        os.chdir("/")
        os.execve(sys.executable, argv, env)
    except OSError as e:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
        sys.stderr.write(f"sloth: renewal: cannot exec {sys.executable}: {e}\n")


# Where the compiled files of what a start loads are looked for: the
# standard library's (asyncio, logging), sloth's own.
COMPILED = ("asyncio.base_events", "logging", "sloth_daemon.daemon.main", "sloth_daemon.daemon.worker.loop")


def optimized(modules: tuple[str, ...] = COMPILED) -> list[str]:
    """``-OO`` for the fresh process where its compiled files are kept: the
    docstrings of every module it loads are then left out, ~1 MB of a daemon
    at rest (docs/idle.md). Kept means each module's ``.opt-2.pyc`` exists or
    can be written beside it (a user's install; pyenv's standard library ships
    them): else every renewal would compile all it loads from source (~1 s
    of CPU, and the compiler's garbage left in the heap it renews to shed),
    so it runs as it was started. Asserts (-O) are only types' narrowing in
    sloth; no daemon path reads a ``__doc__``. Already optimized: -OO (a
    renewed process) is carried by the interpreter's flags; a daemon started
    with -O or PYTHONOPTIMIZE runs as it was started (-O and -OO add up to
    level 3, whose .opt-3.pyc files are not the ones looked for here)."""
    if sys.flags.optimize:
        return []
    for name in modules:
        source = getattr(sys.modules.get(name), "__file__", None)
        if not source or not source.endswith(".py"):
            return []  # frozen, or from a zip: nothing to look for
        compiled = importlib.util.cache_from_source(source, optimization=2)
        folder = os.path.dirname(compiled)
        if not os.path.exists(compiled) and (sys.dont_write_bytecode or not os.access(
                folder if os.path.isdir(folder) else os.path.dirname(folder), os.W_OK)):
            return []
    return ["-OO"]


def same_file(fd: int, path: Path) -> bool:
    """Whether ``fd`` is the file at ``path`` (the lock handed over is still the lock file)."""
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
