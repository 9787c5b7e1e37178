"""Mail on failure (docs/telling.md) through a real SMTP server on loopback
(aiosmtpd): failures only by default (chronic's rule), ``mail_on`` widens;
STARTTLS verified against the server's own CA with a login whose password
comes from a file; the summary and the log's tail in the body; the key in
X-Sloth-Key and Message-ID."""

from __future__ import annotations

import email
import ssl
import subprocess

import pytest

from tests.unit.daemon.test_telling_sender import make_sender, run_job

aiosmtpd = pytest.importorskip("aiosmtpd.controller")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Inbox:
    def __init__(self) -> None:
        self.mails: list[email.message.Message] = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd's hook
        self.mails.append(email.message_from_bytes(envelope.content))
        return "250 OK"


@pytest.fixture
def smtp():
    inbox = Inbox()
    port = free_port()
    c = aiosmtpd.Controller(inbox, hostname="127.0.0.1", port=port)
    c.start()
    yield inbox, port
    c.stop()


@pytest.fixture
def tls_smtp(tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    inbox, logins = Inbox(), []

    def auth(server, session, envelope, mechanism, data):
        from aiosmtpd.smtp import AuthResult

        logins.append((data.login, data.password))
        return AuthResult(success=data.password == b"mail-pass-77")
    port = free_port()
    c = aiosmtpd.Controller(inbox, hostname="127.0.0.1", port=port, tls_context=ctx, require_starttls=True,
                            authenticator=auth)
    c.start()
    yield inbox, port, cert, logins
    c.stop()


def test_a_failure_is_mailed_with_its_log_tail_and_a_success_is_not(q, clock, tmp_path, smtp):
    inbox, port = smtp
    s = make_sender(q, tmp_path, smtp_host="127.0.0.1", smtp_port=port, smtp_starttls=False,
                    mail_from="sloth@test")
    bad = run_job(q, clock, {"mail_to": "me@example.org"}, [7], logs=tmp_path / "logs")
    run_job(q, clock, {"mail_to": "me@example.org"}, [0])
    wide = run_job(q, clock, {"mail_to": ["a@example.org", "b@example.org"], "mail_on": "done"}, [0])
    while s.pump():
        pass
    assert len(inbox.mails) == 2
    fail, done = inbox.mails
    assert fail["Subject"].startswith(f"sloth: job {bad} failed (exit 7)") and fail["To"] == "me@example.org"
    assert "run 1 says exit 7" in fail.get_payload() and fail["X-Sloth-Key"].endswith(f"job:{bad}:1:failed")
    assert fail["Message-ID"].endswith("@sloth>") and fail["From"] == "sloth@test"
    assert done["Subject"].startswith(f"sloth: job {wide} done") and done["To"] == "a@example.org, b@example.org"
    assert q.outbox_counts() == {"pending": 0, "failed": 0, "sent": 2}


def test_starttls_is_verified_and_the_password_comes_from_a_file(q, clock, tmp_path, tls_smtp):
    inbox, port, cert, logins = tls_smtp
    pw = tmp_path / "pw"
    pw.write_text("mail-pass-77\n")
    common = {"smtp_host": "127.0.0.1", "smtp_port": port, "smtp_user": "me"}
    untrusted = make_sender(q, tmp_path, **common, smtp_password_file=str(pw))
    run_job(q, clock, {"mail_to": "me@example.org"}, [1])
    untrusted.pump()
    (m,) = q.outbox.messages()
    assert inbox.mails == [] and "SSLCertVerificationError" in (m.last_error or "")  # never sent in clear
    trusted = make_sender(q, tmp_path, **common, smtp_password_file=str(pw), ca_file=str(cert))
    q.outbox.retry([m.id])
    trusted.pump()
    assert len(inbox.mails) == 1 and logins == [(b"me", b"mail-pass-77")]


def test_a_password_file_that_is_a_fifo_is_a_clear_error_not_a_thread_stuck_for_good(q, clock, tmp_path, tls_smtp):
    from tests.support.fifo import make_fifo, not_stuck_on

    inbox, port, cert, logins = tls_smtp
    fifo = make_fifo(tmp_path / "pw")
    s = make_sender(q, tmp_path, smtp_host="127.0.0.1", smtp_port=port, smtp_user="me",
                    smtp_password_file=str(fifo), ca_file=str(cert))
    run_job(q, clock, {"mail_to": "me@example.org"}, [1])
    not_stuck_on(fifo, s.pump)
    (m,) = q.outbox.messages()
    assert inbox.mails == [] and "is a FIFO, not a regular file" in (m.last_error or "")


def test_an_smtp_server_that_trickles_is_cut_at_the_timeout():
    """smtplib's timeout bounds one wait: a server whose greeting goes on a
    byte at a time ("220-" lines without end) held the thread for good."""
    import socket
    import threading
    import time

    from sloth_daemon.daemon.telling import mail
    from sloth_daemon.daemon.telling.failure import DeliveryError

    srv = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            line = b"220-still greeting\r\n"
            for i in range(400):  # 20 s at most
                if stop.wait(0.05):
                    return
                try:
                    conn.sendall(line[i % len(line):][:1])
                except OSError:
                    return

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    msg = email.message.EmailMessage()
    msg["To"], msg["From"] = "me@example.org", "sloth@test"
    t0 = time.monotonic()
    try:
        with pytest.raises(DeliveryError, match="no answer in time"):
            mail.send(msg, {"smtp_host": "127.0.0.1", "smtp_port": srv.getsockname()[1]}, 1.0)
    finally:
        took = time.monotonic() - t0
        stop.set()
        srv.close()
        t.join(5)
    assert took < 3.0


class GrumpyAtQuit(Inbox):
    """Takes every mail, then answers QUIT with ``reply`` instead of 221."""

    def __init__(self, reply: str) -> None:
        super().__init__()
        self.reply = reply

    async def handle_QUIT(self, server, session, envelope):  # noqa: N802 - aiosmtpd's hook
        return self.reply


@pytest.mark.parametrize("reply", ["421 closing the channel", "500 what"])
def test_a_mail_the_server_took_is_sent_whatever_it_answers_to_quit(q, clock, tmp_path, reply):
    """The QUIT after a mail was taken (250 after its DATA) is manners: a
    server that answered it 421 had the mail sent again at the next try (a
    second copy in the inbox), one that answered 500 had it kept as failed
    for good ('answered 500'), though it was delivered."""
    inbox = GrumpyAtQuit(reply)
    port = free_port()
    c = aiosmtpd.Controller(inbox, hostname="127.0.0.1", port=port)
    c.start()
    try:
        s = make_sender(q, tmp_path, smtp_host="127.0.0.1", smtp_port=port, smtp_starttls=False,
                        mail_from="sloth@test")
        run_job(q, clock, {"mail_to": "me@example.org"}, [7])
        for _ in range(3):
            s.pump()
            clock.advance(3600)  # any try again is due
    finally:
        c.stop()
    assert len(inbox.mails) == 1
    assert q.outbox_counts() == {"pending": 0, "failed": 0, "sent": 1}
