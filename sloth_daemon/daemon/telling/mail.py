"""Mail out with the standard library: through ``[tell] smtp_host`` (smtplib,
STARTTLS unless ``smtp_starttls = false``, verified; login with
``smtp_user`` and ``smtp_password`` or the first line of
``smtp_password_file``), else the local ``sendmail`` (``[tell] sendmail``,
default /usr/sbin/sendmail: ``-t -oi``, the message on stdin). Credentials
come from the config or a file, never a command line. Runs on a sender's
thread."""

from __future__ import annotations

import os
import smtplib
import socket
import subprocess
from email.message import EmailMessage
from typing import Any, Mapping

from sloth_daemon.daemon.telling.failure import DeliveryError
from sloth_daemon.daemon.telling.http import Cutoff, tls_context
from sloth_daemon.safefile import read_file

SENDMAIL = "/usr/sbin/sendmail"
PASSWORD_CAP = 4096


def default_sender() -> str:
    return f"sloth@{socket.gethostname() or 'localhost'}"


def send(msg: EmailMessage, tell: Mapping[str, Any], timeout_s: float) -> None:
    """Raises DeliveryError."""
    if tell.get("smtp_host"):
        _smtp(msg, tell, timeout_s)
    else:
        _sendmail(msg, str(tell.get("sendmail") or SENDMAIL), timeout_s)


def _smtp(msg: EmailMessage, tell: Mapping[str, Any], timeout_s: float) -> None:
    host, port = str(tell["smtp_host"]), int(tell.get("smtp_port") or 587)
    s = smtplib.SMTP(timeout=timeout_s)  # connected below, once the cutoff can see its socket
    s._host = host  # type: ignore[attr-defined]  # what the constructor would keep for STARTTLS's server_hostname (connect() does not)
    cutoff = Cutoff(lambda: s.sock, timeout_s)  # timeout_s bounds the whole exchange (its QUIT too), not each wait
    try:
        s.connect(host, port)
        if tell.get("smtp_starttls", True):
            s.starttls(context=tls_context(tell.get("ca_file")))
        user = tell.get("smtp_user")
        if user:
            s.login(str(user), _password(tell))
        s.send_message(msg)
    except smtplib.SMTPResponseException as e:
        raise DeliveryError(f"smtp {host}:{port} answered {e.smtp_code}", permanent=500 <= e.smtp_code < 600) from None
    except smtplib.SMTPRecipientsRefused:
        raise DeliveryError(f"smtp {host}:{port} refused the recipients", permanent=True) from None
    except (OSError, smtplib.SMTPException) as e:
        if cutoff.fired:
            raise DeliveryError(f"smtp {host}:{port}: no answer in time") from None
        raise DeliveryError(f"smtp {host}:{port}: {type(e).__name__}") from None
    finally:
        _quit(s)
        cutoff.timer.cancel()


def _quit(s: smtplib.SMTP) -> None:
    """QUIT, as manners: whatever the server answers, or if it is gone, the
    mail was taken (or refused) before it (``with SMTP`` raised a non-221
    answer: a mail delivered was then kept failed, or sent again)."""
    try:
        s.quit()
    except (OSError, smtplib.SMTPException):
        s.close()


def _password(tell: Mapping[str, Any]) -> str:
    if tell.get("smtp_password"):
        return str(tell["smtp_password"])
    f = tell.get("smtp_password_file")
    if not f:
        raise DeliveryError("smtp_user is set but neither smtp_password nor smtp_password_file", permanent=True)
    try:  # a FIFO, a device or a huge file in its place is refused, never waited on
        return read_file(f, PASSWORD_CAP, follow=True).decode().splitlines()[0]
    except OSError as e:
        raise DeliveryError(f"cannot read smtp_password_file {f}: {e.strerror or type(e).__name__}") from None
    except (IndexError, UnicodeDecodeError) as e:
        raise DeliveryError(f"cannot read smtp_password_file {f}: {type(e).__name__}") from None


def _sendmail(msg: EmailMessage, exe: str, timeout_s: float) -> None:
    if not os.access(exe, os.X_OK):
        raise DeliveryError(f"no sendmail at {exe}: set [tell] smtp_host or sendmail", permanent=False)
    try:
        out = subprocess.run([exe, "-t", "-oi"], input=msg.as_bytes(), capture_output=True, timeout=timeout_s,
                             check=False, start_new_session=True)
    except subprocess.TimeoutExpired:
        raise DeliveryError(f"{exe} still running after {timeout_s:g}s") from None
    except OSError as e:
        raise DeliveryError(f"{exe}: {e.strerror}") from None
    if out.returncode:
        raise DeliveryError(f"{exe} exited {out.returncode}: {out.stderr[:200].decode('utf-8', 'replace')}")
