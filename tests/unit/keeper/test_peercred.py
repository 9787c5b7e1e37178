"""Peer credentials: the structs we parse, and a real socketpair reporting our own uid."""

from __future__ import annotations

import os
import socket
import struct
import sys

import pytest

from sloth_daemon.keeper import peercred


def test_parse_ucred_linux_layout():
    raw = struct.pack("3i", 4242, 1000, 100)
    assert peercred.parse_ucred(raw) == (4242, 1000, 100)


def test_parse_ucred_ignores_trailing_bytes():
    assert peercred.parse_ucred(struct.pack("3i", 1, 2, 3) + b"\0" * 8) == (1, 2, 3)


def test_parse_xucred_macos_layout():
    # struct xucred { u_int cr_version; uid_t cr_uid; short cr_ngroups; gid_t cr_groups[16]; }
    raw = struct.pack("IIh2x16I", peercred.XUCRED_VERSION, 501, 2, 20, 12, *([0] * 14))
    assert peercred.parse_xucred(raw) == 501


def test_parse_xucred_rejects_an_unknown_version():
    with pytest.raises(OSError):
        peercred.parse_xucred(struct.pack("II", 7, 501) + b"\0" * 68)


@pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="needs Unix sockets")
def test_peer_uid_of_a_real_socketpair_is_ours():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        assert peercred.peer_uid(a) == os.getuid()
        assert peercred.peer_uid(b) == os.getuid()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_PEERCRED is Linux")
def test_linux_ucred_also_gives_the_peer_pid():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        raw = a.getsockopt(socket.SOL_SOCKET, peercred.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, gid = peercred.parse_ucred(raw)
        assert (pid, uid, gid) == (os.getpid(), os.getuid(), os.getgid())


def test_bsd_path_gives_our_uid_or_fails_loudly():
    # Where libc has getpeereid (BSDs, macOS) it must report us; where it has
    # not (Linux glibc), the BSD path must raise naming the platform, not return junk.
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        try:
            uid = peercred._bsd_peer_uid(a, "freebsd")
        except OSError as e:
            assert "freebsd" in str(e)
        else:
            assert uid == os.getuid()


@pytest.mark.skipif(sys.platform not in ("linux", "darwin"), reason="SO_PEERCRED / LOCAL_PEERPID")
def test_peer_pid_is_the_connecting_process_and_unknown_elsewhere():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        assert peercred.peer_pid(a) == os.getpid()
        assert peercred.peer_pid(a, platform="sunos5") is None  # no way to ask: nothing may rest on it
