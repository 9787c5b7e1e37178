"""One exchange with a receiver (telling/http.py) against real sockets on
loopback: ``timeout_s`` bounds the whole of it, however the receiver
answers -- a byte at a time, in its headers or its body -- so a receiver
that trickles holds a sender's thread no longer than a hung one."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from sloth_daemon.daemon.telling import http
from sloth_daemon.daemon.telling.failure import DeliveryError


class Trickler:
    """Answers every connection with ``head`` at once, then one byte of
    ``drip`` every ``every`` seconds, until closed."""

    def __init__(self, head: bytes, drip: bytes, every: float = 0.05) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/ping/secret-uuid"
        self.head, self.drip, self.every = head, drip, every
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            conn.recv(65536)
            try:
                conn.sendall(self.head)
                for i in range(int(10 / self.every)):  # 10 s at most
                    if self.stop.wait(self.every):
                        return
                    conn.sendall(self.drip[i % len(self.drip):][:1])
            except OSError:
                return

    def close(self) -> None:
        self.stop.set()
        self.sock.close()
        self.thread.join(5)


@pytest.mark.parametrize("head, drip", [
    (b"", b"HTTP/1.1 200 OK\r\n"),  # the status line a byte at a time
    (b"HTTP/1.1 200 OK\r\n", b"X-Slow: yes yes yes yes yes\r\n"),  # headers without end
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n", b"x"),  # a body a byte at a time
], ids=["status", "headers", "body"])
def test_a_receiver_that_trickles_is_cut_at_the_timeout(head, drip):
    rx = Trickler(head, drip)
    try:
        t0 = time.monotonic()
        try:
            http.request("POST", rx.url, b"{}", {}, timeout_s=1.0)
        except DeliveryError as e:
            assert "secret-uuid" not in str(e)
        took = time.monotonic() - t0
    finally:
        rx.close()
    assert took < 3.0, f"a 1 s exchange took {took:.1f} s"


class Redirector:
    """Answers every request with ``status`` and a Location of its choosing."""

    def __init__(self, status: int, location: bytes) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/ping/secret-uuid?token=secret-token"
        self.answer = b"HTTP/1.1 %d Moved\r\nLocation: %s\r\nContent-Length: 0\r\n\r\n" % (status, location)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(self.answer)

    def close(self) -> None:
        try:  # wakes the accept() (a close alone does not: the join waited its 5 s)
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(5)


@pytest.mark.parametrize("status", [303, 307])
@pytest.mark.parametrize("location", [b"?a b", b"?x\x01y", b"/ping/secret-uuid x", b"#a b"])
def test_an_error_never_says_the_urls_secret_parts_even_after_a_redirect(status, location):
    """A receiver's Location with a space or a control character (relative:
    the path and query are still ours) made http.client refuse the next
    request line, quoting it: our ping's UUID and token went into the
    DeliveryError, so into the daemon log and `sloth outbox ls`."""
    rx = Redirector(status, location)
    try:
        with pytest.raises(DeliveryError) as e:
            http.request("POST", rx.url, b"{}", {}, timeout_s=3.0)
    finally:
        rx.close()
    assert "secret" not in str(e.value), str(e.value)


@pytest.mark.parametrize("location", [b"http://127.0.0.1:99999/x", b"http://127.0.0.1:abc/x", b"http://[::1/x",
                                      b"//127.0.0.1:0x50/x"])
def test_a_redirect_to_a_url_that_cannot_be_parsed_is_a_refusal_not_a_crash(location):
    """A receiver's Location with a port out of range, a port that is no
    number or a broken IPv6 host made urlsplit raise ValueError out of the
    exchange: the sender logged a traceback ('delivering ...') and tried the
    message again for 24 hours as 'ValueError while delivering'."""
    rx = Redirector(307, location)
    try:
        with pytest.raises(DeliveryError) as e:
            http.request("POST", rx.url, b"{}", {}, timeout_s=3.0)
    finally:
        rx.close()
    assert e.value.permanent and "redirected to" in str(e.value) and "secret" not in str(e.value), str(e.value)


def test_a_receivers_words_in_an_error_cannot_drive_a_terminal():
    """A status line of garbage is quoted by http.client (BadStatusLine):
    the receiver's bytes, escape sequences and all, went into the
    DeliveryError, so into `sloth outbox ls --json` and the daemon log (a
    journal read on a terminal: a title set, the screen cleared)."""
    rx = Redirector(307, b"/")
    rx.answer = b"\x1b]0;pwned\x07\x1b[2J\rnot http\r\n\r\n"
    try:
        with pytest.raises(DeliveryError) as e:
            http.request("POST", rx.url, b"{}", {}, timeout_s=3.0)
    finally:
        rx.close()
    said = str(e.value)
    assert "BadStatusLine" in said and not any(c < " " or c == "\x7f" for c in said), repr(said)
