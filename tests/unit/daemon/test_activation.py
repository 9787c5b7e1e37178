"""Socket activation (daemon/activation.py): which passed descriptors the
daemon takes, on real sockets; the sd_listen_fds variables; launchd's
launch_activate_socket through ctypes, with a C-callable stand-in for
libSystem's function (launchd itself runs only on macOS)."""

from __future__ import annotations

import ctypes
import os
import socket
from pathlib import Path

import pytest

from sloth_daemon.daemon import activation


@pytest.fixture
def short_dir():
    import shutil
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="sla-"))  # socket paths are short
    yield d
    shutil.rmtree(d, ignore_errors=True)


def listening(path: Path, kind: int = socket.SOCK_STREAM, listen: bool = True) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, kind)
    s.bind(str(path))
    if listen:
        s.listen(4)
    return s


def test_a_listening_unix_stream_socket_at_the_daemons_path_is_taken(short_dir):
    path = short_dir / "sloth.sock"
    s = listening(path)
    fd = os.dup(s.fileno())
    os.set_inheritable(fd, True)
    taken, why = activation.checked(fd, path)
    assert taken is not None and why == ""
    assert taken.fileno() == fd and not taken.get_inheritable()  # the keeper and jobs never get it
    c = socket.socket(socket.AF_UNIX)
    c.connect(str(path))
    conn, _ = taken.accept()
    conn.close(), c.close(), taken.close(), s.close()


@pytest.mark.parametrize("what, make, said", [
    ("another path", lambda d: listening(d / "other.sock"), "not at"),
    ("a datagram socket", lambda d: listening(d / "sloth.sock", socket.SOCK_DGRAM, listen=False),
     "not a Unix stream socket"),
    ("a socket that does not listen", lambda d: listening(d / "sloth.sock", listen=False), "does not listen"),
])
def test_anything_else_is_refused_saying_why_and_left_for_the_caller_to_close(short_dir, what, make, said):
    s = make(short_dir)
    fd = os.dup(s.fileno())
    taken, why = activation.checked(fd, short_dir / "sloth.sock")
    assert taken is None and said in why, (what, why)
    os.fstat(fd)  # still open: refused, not closed behind the caller's back
    os.close(fd), s.close()


def test_a_tcp_port_and_a_pipe_are_refused(short_dir):
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(1)
    taken, why = activation.checked(tcp.fileno(), short_dir / "sloth.sock")
    assert taken is None and "AF_INET" in why
    r, w = os.pipe()
    assert activation.checked(r, short_dir / "sloth.sock") == (None, "which is not a socket")
    tcp.close(), os.close(r), os.close(w)


def test_listen_pid_must_be_ours_and_the_variables_are_removed_either_way():
    env = {"LISTEN_PID": str(os.getpid() + 1), "LISTEN_FDS": "1", "LISTEN_FDNAMES": "sloth.socket", "X": "y"}
    assert activation.systemd_fds(env) == []
    assert env == {"X": "y"}  # the keeper and its jobs must not think they were passed a socket
    env = {"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": "2"}
    assert activation.systemd_fds(env) == [3, 4] and env == {}
    for bad in ("0", "x", "-1", "1000"):
        assert activation.systemd_fds({"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": bad}) == []
    assert activation.systemd_fds({}) == []  # not activated: nothing said


def test_inherited_takes_fd_3_from_systemd_in_a_real_process(short_dir):
    """The whole path in a child: a listening socket dup'ed to fd 3 with
    LISTEN_PID set to the child's own pid, as systemd execs a service."""
    import subprocess
    import sys

    path = short_dir / "sloth.sock"
    s = listening(path)
    code = ("import logging, os, sys; from pathlib import Path; from sloth_daemon.daemon import activation as a\n"
            "logging.basicConfig(level=logging.INFO)\n"
            "os.environ['LISTEN_PID'] = str(os.getpid())\n"
            "sock = a.inherited(Path(sys.argv[1]))\n"
            "print(sock is not None and sock.fileno(), 'LISTEN_FDS' in os.environ)\n"
            "c, _ = sock.accept(); c.sendall(b'hi'); c.close()\n")
    child = subprocess.Popen([sys.executable, "-c", code, str(path)], env={**os.environ, "LISTEN_FDS": "1"},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(3,),
                             preexec_fn=lambda: os.dup2(s.fileno(), 3))
    c = socket.socket(socket.AF_UNIX)
    c.connect(str(path))
    assert c.recv(2) == b"hi"
    out, err = child.communicate(timeout=30)
    assert out.decode().split() == ["3", "False"], err.decode()
    assert b"listening on the socket systemd made for" in err
    c.close(), s.close()


# ------------------------------------------------------------------ launchd
PROTO = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_int)),
                         ctypes.POINTER(ctypes.c_size_t))


class LibSystem:
    """launch_activate_socket(3)'s contract, as a C function: the name
    asked, a malloc'ed array of descriptors and its length, or an errno;
    free() is the C library's own, so the array must really be malloc's."""

    def __init__(self, result: int, fds: list[int]) -> None:
        libc = ctypes.CDLL(None)
        libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
        self.free, self.asked, self.freed = libc.free, [], 0
        self._malloc = libc.malloc

        def activate(name, fds_out, count_out):
            self.asked.append(name)
            if result:
                return result
            arr = ctypes.cast(self._malloc(ctypes.sizeof(ctypes.c_int) * max(len(fds), 1)),
                              ctypes.POINTER(ctypes.c_int))
            for i, fd in enumerate(fds):
                arr[i] = fd
            fds_out[0] = arr
            count_out[0] = len(fds)
            return 0

        self.launch_activate_socket = PROTO(activate)


def test_launchd_fds_reads_the_array_and_frees_it():
    lib = LibSystem(0, [7, 9])
    assert activation.launchd_fds(lib) == [7, 9]
    assert lib.asked == [b"Listeners"]  # the plist's Sockets key's name


@pytest.mark.parametrize("err", [3, 2])  # ESRCH: not started by launchd; ENOENT: no such socket in the plist
def test_launchd_not_managing_us_is_no_socket_quietly(err, caplog):
    assert activation.launchd_fds(LibSystem(err, [])) == []
    assert not caplog.records


def test_launchd_another_error_is_logged(caplog):
    assert activation.launchd_fds(LibSystem(22, [])) == []
    assert "launch_activate_socket: Invalid argument" in caplog.text


def test_a_c_library_without_the_function_is_no_socket():
    assert activation.launchd_fds(ctypes.CDLL(None)) == []  # glibc: no launch_activate_socket
