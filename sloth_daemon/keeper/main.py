"""The keeper: the small process that outlives the daemon and owns running jobs.

One per data dir (an flock on keeper.lock). It is the parent of every job:
it spawns them, writes their output to their logs, waits for their exit and
keeps each outcome (journalled) until the daemon acknowledges it. It
enforces each run's timeout and trust deadline itself, connected daemon or
not, so nothing runs unwatched. It knows nothing of the queue, SQLite,
lanes or the CLI. Its contract (wire protocol, journal, trust rule) is in
keeper/wire.py; keeper_client.py is the daemon's side of it.

This module is its start (``python -m sloth_daemon.keeper``, keeper/__main__.py): arguments,
the lock, the socket, detaching. The rest: keeper/server.py (connections,
ops, when to exit), keeper/kept_runs.py (the run table: exits, timeouts, trust,
orphans) and the pending runs it owns, keeper/pending.py (spawn ``after``),
keeper/tap.py (following a run's output), and below those run.py (what is
held of one run), runner.py (one job's process), spawning.py (how it is
made), joblog.py (its log), childwatch.py (SIGCHLD, subreaper).

Every import is at the top, here and in each of those: an upgrade replaces
files under a running keeper.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import fcntl
import logging
import os
import signal
import socket
import stat
import sys
from pathlib import Path

from sloth_daemon import __version__
from sloth_daemon.text import log_to_stderr
from sloth_daemon.keeper.server import Keeper
from sloth_daemon.keeper.spawning import seal_descriptors
from sloth_daemon.safefile import open_file

log = logging.getLogger("sloth.keeper")

EXIT_LOCKED = 6


# --------------------------------------------------------------- start-up
class Locked(Exception):
    pass


def take_lock(path: Path) -> int:
    """flock keeper.lock for our lifetime (the kernel drops it however we die)."""
    fd = open_file(path, os.O_RDWR | os.O_CREAT)  # a FIFO there is refused (paths.py), not waited on
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise Locked(holder) from None
        raise
    return fd


def listen(path: Path) -> socket.socket:
    """keeper.sock, 0600 from birth. We hold the lock, so a socket (or a
    symlink: unlinking one never touches its target) at the path is a dead
    keeper's leftover; anything else is not ours to delete."""
    try:
        st = os.lstat(path)
        if not (stat.S_ISSOCK(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            raise OSError(errno.EEXIST, "something that is not a socket is in the way")
        os.unlink(path)
    except FileNotFoundError:
        pass
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        s.bind(str(path))
    finally:
        os.umask(old)  # jobs inherit ours: keep the user's
    s.listen(128)
    return s


def detach(log_path: Path | None) -> None:
    """Into the background: our output to the log, then fork; the parent
    exits 0, which tells the starter we are listening."""
    fd = open_file(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT) if log_path else os.open(os.devnull, os.O_WRONLY)
    sys.stdout.flush()
    sys.stderr.flush()
    for target in (1, 2):
        os.dup2(fd, target)
    os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    if os.fork() != 0:
        os._exit(0)
    os.setsid()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m sloth_daemon.keeper")
    p.add_argument("--socket", type=Path, required=True)
    p.add_argument("--lock", type=Path, required=True)
    p.add_argument("--journal", type=Path, required=True)
    p.add_argument("--daemon-lock", type=Path, help="the daemon's instance lock: only its holder may attach")
    p.add_argument("--log", type=Path, help="with --detach: where our output goes")
    p.add_argument("--check-s", type=float, default=5.0)
    p.add_argument("--idle-exit-s", type=float, default=10.0)
    p.add_argument("--detach", action="store_true", help="fork into the background once listening")
    a = p.parse_args(argv)
    for name in ("socket", "lock", "journal", "log", "daemon_lock"):
        if getattr(a, name) is not None:
            setattr(a, name, getattr(a, name).absolute())
    return a


def main(argv: list[str] | None = None) -> int:
    for sig in (signal.SIGINT, signal.SIGHUP):  # until serve() puts handlers in (jobs must not inherit SIG_IGN)
        signal.signal(sig, signal.SIG_IGN)
    a = parse_args(argv)
    log_to_stderr(logging.DEBUG if os.environ.get("SLOTH_DEBUG") else logging.INFO,
                          "%(asctime)s sloth-keeper[%(process)d] %(levelname)s: %(message)s")
    try:
        lock = take_lock(a.lock)
    except Locked as e:
        print(f"sloth keeper: another keeper (pid {e}) holds {a.lock}", file=sys.stderr)
        return EXIT_LOCKED
    except OSError as e:
        print(f"sloth keeper: cannot lock {a.lock}: {e.strerror or e}", file=sys.stderr)
        return 1
    try:
        sock = listen(a.socket)
    except OSError as e:
        print(f"sloth keeper: cannot listen on {a.socket}: {e.strerror or e}", file=sys.stderr)
        return 1
    if a.detach:
        try:
            detach(a.log)
        except OSError as e:  # before the fork: the starter reads this
            print(f"sloth keeper: cannot open its log {a.log}: {e.strerror or e}", file=sys.stderr)
            return 1
    os.chdir("/")
    seal_descriptors()  # whatever our starter left open is no job's (jobs are spawned without closing any)
    os.ftruncate(lock, 0)
    os.pwrite(lock, f"{os.getpid()}\n".encode(), 0)
    log.info("sloth keeper %s listening on %s", __version__, a.socket)
    code = asyncio.run(Keeper(a.journal, check_s=a.check_s, idle_exit_s=a.idle_exit_s,
                              daemon_lock=a.daemon_lock).serve(sock))
    try:
        os.unlink(a.socket)  # ours: we hold the lock until we are gone
    except OSError:
        pass
    return code


if __name__ == "__main__":
    sys.exit(main())
