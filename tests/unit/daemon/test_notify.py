"""sd_notify by hand: datagrams on a real AF_UNIX socket, path and abstract."""

from __future__ import annotations

import os
import socket
import sys
import uuid

import pytest

from sloth_daemon.daemon.sdnotify import Notifier


@pytest.fixture
def path_sock(tmp_path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(tmp_path / "notify.sock")
    s.bind(path)
    s.settimeout(2)
    yield s, path
    s.close()


def recv(s: socket.socket) -> str:
    return s.recv(4096).decode()


def test_ready_watchdog_stopping_status_reach_a_path_socket(path_sock):
    s, path = path_sock
    n = Notifier.from_env({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "30000000"})
    assert n.enabled
    assert n.watchdog_interval_s == 15.0
    assert n.ready("listening on /run/x") is True
    assert recv(s) == "READY=1\nSTATUS=listening on /run/x"
    assert n.watchdog() is True
    assert recv(s) == "WATCHDOG=1"
    assert n.stopping("3 running\n2 queued") is True
    assert recv(s) == "STOPPING=1\nSTATUS=3 running 2 queued"  # a newline would inject an assignment
    assert n.stopping() is True
    assert recv(s) == "STOPPING=1"
    assert n.ready() is True
    assert recv(s) == "READY=1"
    n.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="abstract sockets are Linux-only")
def test_abstract_socket_name():
    name = f"sloth-test-{uuid.uuid4().hex}"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind("\0" + name)
    s.settimeout(2)
    try:
        n = Notifier.from_env({"NOTIFY_SOCKET": "@" + name})
        assert n.enabled and n.watchdog_interval_s is None
        assert n.ready("up") is True
        assert recv(s) == "READY=1\nSTATUS=up"
        assert n.watchdog() is False  # no WatchdogSec: nothing is sent
        n.stopping()
        assert recv(s) == "STOPPING=1"
    finally:
        s.close()


def test_disabled_without_notify_socket_is_a_no_op():
    n = Notifier.from_env({})
    assert not n.enabled
    assert n.watchdog_interval_s is None
    assert n.ready("x") is False
    assert n.watchdog() is False
    assert n.stopping() is False


@pytest.mark.parametrize("value", ["relative/path", "vsock:2:1234", "@"])
def test_unsupported_addresses_disable_it(value):
    assert not Notifier.from_env({"NOTIFY_SOCKET": value}).enabled


def test_send_errors_never_raise(tmp_path):
    n = Notifier.from_env({"NOTIFY_SOCKET": str(tmp_path / "gone.sock"), "WATCHDOG_USEC": "1000000"})
    assert n.enabled
    assert n.ready() is False
    assert n.watchdog() is False
    assert n.stopping() is False


def test_socket_that_went_away_after_start(path_sock, tmp_path):
    s, path = path_sock
    n = Notifier.from_env({"NOTIFY_SOCKET": path})
    assert n.ready("a") is True
    s.close()
    os.unlink(path)
    assert n.ready("b") is False


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"WATCHDOG_USEC": "20000000"}, 10.0),
        ({"WATCHDOG_USEC": "20000000", "WATCHDOG_PID": str(os.getpid())}, 10.0),
        ({"WATCHDOG_USEC": "20000000", "WATCHDOG_PID": "1"}, None),  # for another process
        ({"WATCHDOG_USEC": "20000000", "WATCHDOG_PID": "nope"}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
        ({}, None),
    ],
)
def test_watchdog_interval(env, expected, tmp_path):
    n = Notifier.from_env({"NOTIFY_SOCKET": str(tmp_path / "n.sock"), **env})
    assert n.watchdog_interval_s == expected


def test_watchdog_needs_a_socket():
    assert Notifier.from_env({"WATCHDOG_USEC": "20000000"}).watchdog_interval_s is None
