"""A queue's password never reaches a terminal or a log (issue 20 item 7).

A URL psycopg cannot parse (a bad percent-escape) made `daemon start`,
`config`, `status` print psycopg's message -- ``invalid percent-encoded
token: "Secret%zz"``, the password itself -- and daemon.log kept it. Here
the real CLI and the real daemon run with such a URL, from the config file
and from SLOTH_QUEUE_URL, and a running daemon on a real PostgreSQL queue
logs a hook's output that quotes its password: every output and every
file sloth wrote is searched for it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.harness import TEST_CONFIG, Harness

pytestmark = pytest.mark.acceptance

SECRET = "Secret%zz"  # not a valid percent-escape: psycopg quotes it in its error
BAD_URL = f"postgresql://me:{SECRET}@127.0.0.1:1/db"
COMMANDS = ("daemon start", "config", "status", "ls", "db status", "--debug status", "doctor")


def written(h: Harness, *, but: tuple[str, ...] = ("config.toml",)) -> dict[str, bytes]:
    """Every file under the harness's home (logs, the foreground daemon's
    output, the keeper's log), but the config the test wrote itself."""
    return {str(p): p.read_bytes() for p in Path(h.home).rglob("*") if p.is_file() and p.name not in but}


@pytest.mark.parametrize("where", ["config", "env"])
def test_a_password_in_a_url_psycopg_cannot_parse_is_in_no_output_and_no_log(make_harness, where):
    config = TEST_CONFIG + (f'queue_url = "{BAD_URL}"\n' if where == "config" else "")
    h = make_harness(config)
    if where == "env":
        h.env["SLOTH_QUEUE_URL"] = h.daemon_env["SLOTH_QUEUE_URL"] = BAD_URL
    said = {c: h.cli(*c.split(), timeout_s=60) for c in COMMANDS}
    foreground = h.start(wait=False)  # `sloth daemon run`: its stderr is the test's daemon log
    assert foreground.wait(30) != 0

    start = said["daemon start"]
    assert start.returncode != 0 and "invalid percent-encoded token" in start.stderr  # the error is told...
    assert '"***"' in start.stderr  # ...with the password masked
    for c, p in said.items():
        assert "Secret" not in p.stdout + p.stderr, f"`sloth {c}` printed the password:\n{p.stdout}{p.stderr}"
    files = written(h)
    assert any(b"invalid percent-encoded token" in data for data in files.values())  # the logs say why
    leaks = [name for name, data in files.items() if b"Secret" in data]
    assert not leaks, f"the password is in {leaks}"


@pytest.mark.postgres
def test_a_running_daemon_masks_its_queue_password_and_any_url_password_in_its_log(make_harness, pg_url):
    """A real daemon on a real PostgreSQL queue whose URL holds a password
    (trust auth: the server never asks for it). A job's on_finish hook
    fails and prints the password bare and another URL's: the daemon logs
    the hook's output, masked."""
    password = "Sekrit-pw-42"
    url = pg_url.replace("://sloth_test@", f"://sloth_test:{password}@")
    assert password in url
    hook = f"echo token {password} and postgresql://u:Other-pw-7@db.example/x; exit 1"
    h = make_harness(TEST_CONFIG + f'queue_url = "{url}"\non_finish = "{hook}"\n')
    h.start()
    job = h.add("true")
    h.wait_state(job, "done")
    h.wait_for(lambda: "on_finish for job" in h.log_text(), what="the hook's failure logged")
    status = h.cli("status")
    h.stop()
    log = h.log_text()
    assert "token *** and postgresql://u:***@db.example/x" in log, log
    assert password not in status.stdout + status.stderr
    leaks = [name for name, data in written(h).items() if password.encode() in data or b"Other-pw-7" in data]
    assert not leaks, f"a password is in {leaks}"
