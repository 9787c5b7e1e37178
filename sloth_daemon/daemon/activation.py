"""The listening socket a service manager made for us (socket activation).

systemd (``sloth.socket``) passes it by the sd_listen_fds protocol:
``LISTEN_PID`` is our pid, ``LISTEN_FDS`` how many descriptors, the first
at fd 3. launchd (the plist's ``Sockets`` key, named ``Listeners``) hands
it over through ``launch_activate_socket(3)``, called here through ctypes.

Either way the socket is taken only if it is what the daemon would have
bound: a listening AF_UNIX stream socket at the daemon's own socket path.
Anything else (a TCP port, a datagram socket, another path: a unit written
for another SLOTH_HOME) is refused with one log line and closed, and the
daemon binds its socket itself, as without a service manager. The
variables are removed from our environment either way (sd_listen_fds's
``unset_environment``): the keeper and its jobs must not think they were
passed a socket.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import socket
import stat
import sys
from pathlib import Path
from typing import Any, MutableMapping

log = logging.getLogger("sloth.activation")
SD_LISTEN_FDS_START = 3
LAUNCHD_SOCKET_NAME = "Listeners"  # the plist's Sockets key names it so (service/io.slothqueue.sloth.plist)


def inherited(path: Path, environ: MutableMapping[str, str] | None = None) -> socket.socket | None:
    """The listening socket for ``path`` our service manager passed us, or None (bind it yourself)."""
    env = os.environ if environ is None else environ
    fds, origin = systemd_fds(env), "systemd"
    if not fds and sys.platform == "darwin":
        fds, origin = launchd_fds(), "launchd"
    chosen: socket.socket | None = None
    for fd in fds:
        sock, why = checked(fd, path)
        if sock is not None and chosen is None:
            chosen = sock
            continue
        log.error("socket activation: %s passed fd %d, %s; not using it", origin, fd,
                  why or "a second socket for the same path")
        if sock is not None:
            sock.close()
        else:
            _close(fd)
    if chosen is not None:
        log.info("socket activation: listening on the socket %s made for %s", origin, path)
    elif fds:
        log.error("socket activation: no usable socket from %s; binding %s myself", origin, path)
    return chosen


def systemd_fds(env: MutableMapping[str, str]) -> list[int]:
    """The descriptors systemd passed this process (sd_listen_fds), the variables removed."""
    pid, n = env.pop("LISTEN_PID", ""), env.pop("LISTEN_FDS", "")
    env.pop("LISTEN_FDNAMES", None)
    if not pid and not n:
        return []
    if not pid.isdigit() or int(pid) != os.getpid():
        log.error("socket activation: LISTEN_PID=%r is not this process (%d); ignoring LISTEN_FDS", pid,
                  os.getpid())
        return []
    if not n.isdigit() or not 0 < int(n) <= 64:
        log.error("socket activation: LISTEN_FDS=%r is no count of descriptors; ignoring it", n)
        return []
    return list(range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + int(n)))


def checked(fd: int, path: Path) -> tuple[socket.socket | None, str]:
    """``fd`` as a socket if it listens as the daemon would (AF_UNIX, stream, at
    ``path``), made non-inheritable; else (None, why not)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError as e:
        return None, f"which is not open ({e.strerror})"
    if not stat.S_ISSOCK(mode):
        return None, "which is not a socket"
    sock = socket.socket(fileno=fd)  # family and type read from the descriptor
    try:
        if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
            why = f"a {sock.family.name} {sock.type.name} socket, not a Unix stream socket"
        elif not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            why = "a socket that does not listen"
        elif (name := sock.getsockname()) != str(path):
            why = f"a socket at {name or '(no path)'!r}, not at {str(path)!r}"
        else:
            sock.set_inheritable(False)  # the keeper and the jobs never hold our listener
            return sock, ""
    except OSError as e:
        why = f"which cannot be inspected ({e.strerror})"
    sock.detach()  # the caller closes the descriptor
    return None, why


def launchd_fds(lib: Any = None) -> list[int]:
    """The descriptors of our ``Listeners`` socket from launchd, [] when
    launchd manages no such socket for us (not started by launchd: ESRCH;
    no Sockets key: ENOENT). ``lib``: the C library (tests give another
    object with the same function)."""
    if lib is None:
        lib = ctypes.CDLL(None, use_errno=True)  # launch_activate_socket is libSystem's (liblaunch)
    fn = getattr(lib, "launch_activate_socket", None)
    if fn is None:
        return []
    fn.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_int)), ctypes.POINTER(ctypes.c_size_t)]
    fn.restype = ctypes.c_int
    fds = ctypes.POINTER(ctypes.c_int)()
    count = ctypes.c_size_t(0)
    err = fn(LAUNCHD_SOCKET_NAME.encode(), ctypes.byref(fds), ctypes.byref(count))
    if err:
        if err not in (errno.ESRCH, errno.ENOENT):
            log.error("socket activation: launch_activate_socket: %s", os.strerror(err))
        return []
    try:
        return [fds[i] for i in range(count.value)]
    finally:
        free = getattr(lib, "free", None)
        if free is not None and fds:
            free.argtypes = [ctypes.c_void_p]
            free(ctypes.cast(fds, ctypes.c_void_p))


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
