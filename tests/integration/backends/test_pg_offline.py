"""The CLI's answers with no daemon, read from a shared queue through its
read-only view (backends.open_read_only, cli/offline.py): what only a
shared queue has (its stored logs, its identity) is reached through the
view's optional parts, on a real PostgreSQL server."""

from __future__ import annotations

import pytest

from sloth_daemon.backends.postgres import logs as pg_logs
from sloth_daemon.cli.offline import answer
from sloth_daemon.config import QUEUE_URL_ENV
from sloth_daemon.paths import resolve
from sloth_daemon.queue import Queue

pytestmark = pytest.mark.postgres


def test_logs_of_a_job_that_ran_on_another_machine_are_read_from_the_queue(pg_url, tmp_path, monkeypatch):
    monkeypatch.setenv(QUEUE_URL_ENV, pg_url)
    paths = resolve({"SLOTH_HOME": str(tmp_path)})
    with Queue(pg_url) as q:
        jid = q.enqueue(["echo", "hello"])
        job = q.claim("elsewhere")
        pg_logs.append(q.engine.store.db, jid, 1, "elsewhere", b"hello\n", 0, True)
        q.complete(jid, job.token)
        assert q.logs is not None and q.machines is not None
    out = answer(paths, "logs", id=jid)
    assert (out["attempt"], out["data"]) == (1, "hello\n")  # no file here: the copy the queue stores
    assert answer(paths, "show", ids=[jid])["jobs"][0]["state"] == "done"
