"""The uid and pid of the process at the other end of a Unix socket, as
the kernel noted them when it connected (what it says of itself is no proof).

Linux: SO_PEERCRED (struct ucred: pid, uid, gid as three ints).
macOS/BSD: getpeereid(3) through ctypes, or LOCAL_PEERCRED (struct xucred);
the pid: LOCAL_PEERPID (macOS).
"""

from __future__ import annotations

import ctypes
import socket
import struct
import sys

SO_PEERCRED = getattr(socket, "SO_PEERCRED", 17)
SOL_LOCAL = 0  # macOS
LOCAL_PEERCRED = 0x001  # macOS <sys/un.h>
LOCAL_PEERPID = 0x002  # macOS <sys/un.h>: pid_t
XUCRED_VERSION = 0


def parse_ucred(raw: bytes) -> tuple[int, int, int]:
    """Linux struct ucred -> (pid, uid, gid)."""
    return struct.unpack("3i", raw[: struct.calcsize("3i")])


def parse_xucred(raw: bytes) -> int:
    """macOS struct xucred {u_int cr_version; uid_t cr_uid; short cr_ngroups; ...} -> uid."""
    version, uid = struct.unpack("II", raw[:8])
    if version != XUCRED_VERSION:
        raise OSError(f"unexpected xucred version {version}")
    return uid


def peer_uid(sock: socket.socket, platform: str = sys.platform) -> int:
    if platform.startswith("linux"):
        raw = sock.getsockopt(socket.SOL_SOCKET, SO_PEERCRED, struct.calcsize("3i"))
        return parse_ucred(raw)[1]
    return _bsd_peer_uid(sock, platform)


def _bsd_peer_uid(sock: socket.socket, platform: str) -> int:
    libc = ctypes.CDLL(None, use_errno=True)  # the process's own symbols, libc's among them
    if hasattr(libc, "getpeereid"):
        uid, gid = ctypes.c_uint32(), ctypes.c_uint32()
        if libc.getpeereid(sock.fileno(), ctypes.byref(uid), ctypes.byref(gid)) == 0:
            return int(uid.value)
    if platform == "darwin":
        raw = sock.getsockopt(SOL_LOCAL, LOCAL_PEERCRED, 76)
        return parse_xucred(raw)
    raise OSError(f"cannot read peer credentials on {platform}")


def peer_pid(sock: socket.socket, platform: str = sys.platform) -> int | None:
    """The pid of the process that connected ``sock``'s other end, or None
    where the kernel cannot say (then nothing may rest on it)."""
    try:
        if platform.startswith("linux"):
            return parse_ucred(sock.getsockopt(socket.SOL_SOCKET, SO_PEERCRED, struct.calcsize("3i")))[0] or None
        if platform == "darwin":
            return struct.unpack("i", sock.getsockopt(SOL_LOCAL, LOCAL_PEERPID, 4))[0] or None
    except OSError:
        return None
    return None
