"""Issue 14, item 7: a broken or replaced database is noticed, never
silently recreated. The real daemon and CLI, a real SQLite file changed
under them the way a clumsy user or a bad disk would."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

pytestmark = pytest.mark.acceptance


def one_line_error(p, *words: str) -> None:
    assert p.returncode != 0, p.stdout
    for w in words:
        assert w in p.stderr, p.stderr
    assert "internal error" not in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_a_database_emptied_under_the_daemon_stops_writes_and_is_never_recreated(harness):
    harness.start()
    done = harness.add("true")
    harness.wait_state(done, "done")
    db = harness.home / "queue.db"
    with open(db, "r+b") as f:  # `: > queue.db`
        f.truncate(0)
    p = harness.cli("add", "--", "true")
    one_line_error(p, "queue database", "truncated", "no more writes", "nothing was queued")
    st = harness.cli_json("daemon", "status")  # still answers, and says what happened
    assert "truncated" in st["queue"]["problem"] and st["counts"] is None
    assert "truncated" in harness.cli("daemon", "status").stdout
    stop = harness.cli("daemon", "stop", "--timeout", "30s")
    assert stop.returncode == 0, stop.stderr  # doctor's own advice can be followed
    assert harness.daemon is not None and harness.daemon.wait(30) == 1  # it stopped with a broken queue
    # A restart refuses the empty file rather than making a new, empty queue in it.
    p = harness.cli("daemon", "start")
    one_line_error(p, "held queue", "is empty", ".recover")
    assert db.stat().st_size == 0
    doc = {c["name"]: c for c in json.loads(harness.cli("doctor", "--json").stdout)["checks"]}
    assert doc["queue"]["status"] == "fail" and "LOST" in doc["queue"]["detail"], doc["queue"]
    assert ".recover" in doc["queue"]["hint"] and doc["database"]["status"] == "fail", doc["database"]


def test_a_database_moved_away_is_noticed_and_a_new_queue_never_writes_into_old_logs(harness):
    harness.start()
    old = harness.add("sh", "-c", "echo from the first queue")
    harness.wait_state(old, "done")
    old_log = Path(harness.call("logs", id=old)["path"])
    db = harness.home / "queue.db"
    os.rename(db, harness.home / "queue.db.broken")
    p = harness.cli("add", "--", "true")
    one_line_error(p, "removed or renamed", "nothing was queued")
    assert harness.cli("daemon", "stop", "--timeout", "30s").returncode == 0
    assert harness.daemon is not None
    harness.daemon.wait(30)
    one_line_error(harness.cli("daemon", "start"), "held queue", "is missing")
    assert not db.exists()  # not silently made anew

    # Starting fresh on purpose: move the identity aside too. Ids restart at 1,
    # but the new job 1 logs into the new queue's own folder.
    os.rename(harness.home / "queue.id", harness.home / "queue.id.old")
    harness.start()
    new = harness.add("sh", "-c", "echo from the second queue")
    assert new == old == 1
    harness.wait_state(new, "done")
    new_log = Path(harness.call("logs", id=new)["path"])
    assert new_log != old_log
    assert old_log.read_bytes() == b"from the first queue\n"
    assert new_log.read_bytes() == b"from the second queue\n"


def test_damaged_pages_are_named_not_called_a_bug(harness, home):
    """Garbage in a few pages: every read that meets it says the database is
    damaged (and the queue takes no writes), never "internal error"."""
    harness.start()
    harness.call("pause")
    harness.add_many([{"command": ["echo", "x" * 2000]} for _ in range(400)])
    assert harness.cli("daemon", "stop").returncode == 0
    assert harness.daemon is not None
    harness.daemon.wait(30)
    db = harness.home / "queue.db"
    with sqlite3.connect(db) as con:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(db.read_bytes())
    for page in range(3, len(data) // 4096 - 1, 3):  # trash every third page, keep the header
        data[page * 4096:(page + 1) * 4096] = b"\xab" * 4096
    db.write_bytes(bytes(data))
    p = harness.cli("daemon", "run", timeout_s=60)
    if p.returncode == 0:  # it started (nothing it read at start was damaged): reads must say so
        pytest.fail("the daemon ran on a damaged database without noticing")
    one_line_error(p, "damaged")


def test_a_queue_from_before_identities_keeps_its_logs(harness):
    """An older sloth kept logs flat in logs/jobs/: the first start with
    identities gives the queue one and moves its logs under it."""
    from sloth_daemon.queue import Queue

    db = harness.home / "queue.db"
    with Queue(db) as q:
        jid = q.enqueue(["true"])
    with sqlite3.connect(db) as con:  # as an older sloth left it: no identity
        con.execute("DELETE FROM meta WHERE key IN ('queue_id', 'queue_created_at')")
    flat = harness.home / "logs" / "jobs"
    flat.mkdir(parents=True)
    (flat / f"{jid}.1.log").write_bytes(b"old output\n")
    harness.start()
    st = harness.call("status")
    assert Path(st["paths"]["jobs_log_dir"]) == flat / st["queue"]["id"]
    assert (harness.home / "queue.id").read_text().strip() == st["queue"]["id"]
    assert Path(harness.call("logs", id=jid, attempt=1)["path"]).read_bytes() == b"old output\n"
    assert not (flat / f"{jid}.1.log").exists()
