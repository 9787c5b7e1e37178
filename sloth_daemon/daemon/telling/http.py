"""One HTTP request to a ping or webhook receiver, bounded every way, with
the standard library (http.client, ssl): a connect and read timeout per
step and a deadline for the whole exchange, at most MAX_REDIRECTS
redirects (never from https to http; a 303 is followed with a GET, as
RFC 9110 says: the receiver took the POST and points at its answer; 301,
302, 307 and 308 repeat the POST, so a moved webhook never silently gets a
GET without its payload), at most RESPONSE_CAP bytes of the
answer read, TLS always verified (the system's CAs, or ``ca_file`` as
well; never skipped). It runs on a sender's thread, never on the loop.

A socket's timeout bounds one wait, not the exchange: a receiver that
sends a byte now and then (its status line, its headers, its body) would
hold the thread for hours. So a timer cuts the socket at the deadline
(``Cutoff``), whatever step the exchange is in (mail.py's SMTP too)."""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from typing import Callable, Mapping
from urllib.parse import urljoin, urlsplit

from sloth_daemon.daemon.telling.failure import DeliveryError
from sloth_daemon.text import mask_url, showable

MAX_REDIRECTS = 3
RESPONSE_CAP = 16 * 1024
REDIRECTS = (301, 302, 303, 307, 308)
BODY_HEADERS = ("content-type", "x-sloth-signature")  # they describe the body a 303's GET leaves out
# Answers that may change if asked again later (a timeout, too many
# requests, a server error); any other 4xx is the request's fault: failed at once.
TRANSIENT = (408, 425, 429)


def tls_context(ca_file: str | None) -> ssl.SSLContext:
    """The default, verifying context; ``ca_file`` trusted besides the system's CAs."""
    ctx = ssl.create_default_context()
    if ca_file:
        ctx.load_verify_locations(ca_file)
    return ctx


def request(method: str, url: str, body: bytes, headers: Mapping[str, str], *, timeout_s: float,
            ca_file: str | None = None) -> int:
    """Send; return the final status (2xx). Raises DeliveryError."""
    deadline = time.monotonic() + timeout_s
    for _ in range(MAX_REDIRECTS + 1):
        status, location = _once(method, url, body, headers, deadline, ca_file)
        if status in REDIRECTS and location:
            try:  # a port out of range or no number, a broken IPv6 host: urljoin or urlsplit raises
                nxt = urljoin(url, location)
                urlsplit(nxt).port  # noqa: B018
            except ValueError:
                raise DeliveryError(f"{mask_url(url)} redirected to a URL that is not valid", permanent=True) from None
            if urlsplit(nxt).scheme not in ("http", "https"):
                raise DeliveryError(f"{mask_url(url)} redirected to a non-HTTP URL", permanent=True)
            if urlsplit(url).scheme == "https" and urlsplit(nxt).scheme != "https":
                raise DeliveryError(f"{mask_url(url)} redirected from https to http: refused", permanent=True)
            url = nxt
            if status == 303 and method != "GET":
                method, body = "GET", b""
                headers = {k: v for k, v in headers.items() if k.lower() not in BODY_HEADERS}
            continue
        if 200 <= status < 300:
            return status
        permanent = 400 <= status < 500 and status not in TRANSIENT
        raise DeliveryError(f"{mask_url(url)} answered HTTP {status}", permanent=permanent)
    raise DeliveryError(f"{mask_url(url)}: more than {MAX_REDIRECTS} redirects", permanent=True)


def _once(method: str, url: str, body: bytes, headers: Mapping[str, str], deadline: float,
          ca_file: str | None) -> tuple[int, str | None]:
    u = urlsplit(url)
    left = deadline - time.monotonic()
    if left <= 0:
        raise DeliveryError(f"{mask_url(url)}: no answer in time")
    conn: http.client.HTTPConnection
    if u.scheme == "https":
        conn = http.client.HTTPSConnection(u.hostname or "", u.port, timeout=left, context=tls_context(ca_file))
    else:
        conn = http.client.HTTPConnection(u.hostname or "", u.port, timeout=left)
    path = (u.path or "/") + (f"?{u.query}" if u.query else "")
    cutoff = Cutoff(lambda: conn.sock, left)
    try:
        sized = {**headers, "Content-Length": str(len(body))} if body or method != "GET" else dict(headers)
        conn.request(method, path, body=body or None, headers=sized)
        resp = conn.getresponse()
    except ssl.SSLCertVerificationError as e:
        raise DeliveryError(f"{mask_url(url)}: TLS certificate not trusted ({e.verify_message})") from None
    except (socket.timeout, TimeoutError):
        raise DeliveryError(f"{mask_url(url)}: no answer in time") from None
    except (OSError, http.client.HTTPException) as e:
        if cutoff.fired:
            raise DeliveryError(f"{mask_url(url)}: no answer in time") from None
        raise DeliveryError(f"{mask_url(url)}: {type(e).__name__}: {_said(e, url)}") from None
    else:
        # The status is the answer; read a little of the body (a keep-alive's
        # manners), never all of a flood, and never past the deadline.
        try:
            got = 0
            while got < RESPONSE_CAP and not cutoff.fired:
                chunk = resp.read(4096)
                if not chunk:
                    break
                got += len(chunk)
        except (OSError, http.client.HTTPException):
            pass
        return resp.status, resp.getheader("Location")
    finally:
        cutoff.timer.cancel()
        conn.close()


class Cutoff:
    """Shuts the socket ``sock()`` gives (None before it connects) down
    ``after`` seconds from now: whatever waits on it (a TLS handshake, a
    send, a read) ends at once."""

    def __init__(self, sock: Callable[[], socket.socket | None], after: float) -> None:
        self.sock, self.fired = sock, False
        self.timer = threading.Timer(after, self._cut)
        self.timer.daemon = True
        self.timer.start()

    def _cut(self) -> None:
        self.fired = True
        sock = self.sock()
        if sock is not None:
            try:  # the plain socket's shutdown: an SSLSocket's own would drop its TLS state under a reader
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:
                pass  # already closed


def _said(e: BaseException, url: str) -> str:
    """What an error says, unless it quotes a URL, or ``url``'s secret parts
    (its path, query or user, as they are or escaped as repr() shows them):
    http.client quotes a request line it refuses, and a receiver's Location
    with a space in it ("?a b", relative: our path and query stay) is one."""
    text = str(e) or type(e).__name__
    u = urlsplit(url)
    parts = [p for p in (u.path, u.query, u.fragment, u.username, u.password) if p and len(p) > 2]
    if "://" in text or any(p in text or repr(p)[1:-1] in text for p in parts):
        return "(an error that quoted the URL)"
    return showable(text.strip())  # a receiver's bytes (a status line of garbage): no escape reaches a terminal
