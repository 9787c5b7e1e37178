"""The parts of a daemon on a shared PostgreSQL queue, each against the real
server: host rows and the rule against two machines under one name, the
stored logs and their shipper, LISTEN/NOTIFY, a lost server failing calls
at once for a moment, and the daemon refusing a schema it does not know.
The whole daemon on three machines: tests/acceptance/test_several_machines.py."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psycopg
import pytest

from sloth_daemon.backends.postgres import logs as pg_logs, db as pgdb
from sloth_daemon.backends.postgres.hosts import Host
from sloth_daemon.queue import Queue
from sloth_daemon.errors import ConfigError, StorageError
from sloth_daemon.daemon.shared.logship import CHUNK, LogShipper
from sloth_daemon.daemon.shared.listen import Listener
from sloth_daemon.daemon.shared.member import options_for

pytestmark = pytest.mark.postgres


def host(name: str = "a", boot: str = "boot-1", pid: int = 100, worker: str = "w1") -> Host:
    return Host(name, ("gpu",), f"sloth-daemon:{name}:{pid}:{worker}", pid, boot, "0.1", 1.0)


# ------------------------------------------------------------------ hosts
def test_a_host_name_is_one_machine_s(pg_url):
    with Queue(pg_url) as q:
        q.machines.register_host(host(), alive_s=30, pid_alive=lambda pid: True)
        with pytest.raises(ConfigError, match="another machine's daemon"):
            q.machines.register_host(host(boot="boot-2", worker="w2"), alive_s=30, pid_alive=lambda pid: True)
        with pytest.raises(ConfigError, match="pid 100 on this machine"):
            q.machines.register_host(host(pid=200, worker="w2"), alive_s=30, pid_alive=lambda pid: True)
        q.machines.register_host(host(pid=200, worker="w2"), alive_s=30, pid_alive=lambda pid: False)  # a restart here
        q.machines.register_host(host(boot="boot-3", worker="w3"), alive_s=0, pid_alive=lambda pid: True)  # long gone
        (row,) = q.machines.hosts()
        assert (row["name"], row["tags"], row["worker"]) == ("a", ["gpu"], "sloth-daemon:a:100:w3")
        q.machines.forget_host(host(boot="boot-1", worker="w1"))  # not the holder any more: nothing goes
        assert len(q.machines.hosts()) == 1
        q.machines.forget_host(host(boot="boot-3", worker="w3"))
        assert q.machines.hosts() == []


# ------------------------------------------------------------------- logs
def test_a_stored_log_grows_by_appends_that_name_their_offset(pg_url):
    with Queue(pg_url) as q:
        jid = q.enqueue(["x"])
        db = q.engine.store.db
        assert pg_logs.append(db, jid, 1, "a", b"hello ", 0, False) == 6
        assert pg_logs.append(db, jid, 1, "a", b"hello ", 0, False) is None  # its answer was lost: not doubled
        assert pg_logs.append(db, jid, 1, "a", b"world", 3, False) is None  # a wrong offset changes nothing
        assert pg_logs.append(db, jid, 1, "a", b"world\n", 6, True) == 12
        part = q.logs.stored_log(jid, 1)
        assert (part.data, part.size, part.done, part.host) == (b"hello world\n", 12, True, "a")
        assert q.logs.stored_log(jid, 1, 6).data == b"world\n"
        assert q.logs.stored_log(jid, 2).size is None
        assert pg_logs.append(db, jid, 3, "a", b"late", 4, False) is None  # no row: only offset 0 makes one
        q.cancel(jid)
        assert q.prune(0) == 1
        assert q.logs.stored_log(jid, 1).size is None  # the job's logs go with it


class FakeRun(SimpleNamespace):
    pass


async def _ticks(shipper: LogShipper, n: int = 1) -> None:
    for _ in range(n):
        await shipper.tick(asyncio.get_running_loop())


def test_the_shipper_stores_a_running_log_as_it_grows_then_all_of_it(pg_url, tmp_path):
    with Queue(pg_url) as q:
        jid = q.enqueue(["x"])
        log = tmp_path / f"{jid}.1.log"
        worker = SimpleNamespace(host="a", name="me", running={jid: FakeRun(job=SimpleNamespace(id=jid), attempt=1)})
        shipper = LogShipper(pg_url, options_for(10), worker, lambda j, a: tmp_path / f"{j}.{a}.log", 1 << 20)

        async def play() -> None:
            await _ticks(shipper)
            assert q.logs.stored_log(jid, 1).size is None  # nothing printed yet: no row
            log.write_bytes(b"x" * (CHUNK + 10))
            await _ticks(shipper)
            assert q.logs.stored_log(jid, 1).size == CHUNK  # at most a chunk a second
            await _ticks(shipper)
            assert q.logs.stored_log(jid, 1).size == CHUNK + 10 and not q.logs.stored_log(jid, 1).done
            log.write_bytes(log.read_bytes() + b"end\n")
            worker.running.clear()  # the run's outcome is recorded: the file is complete
            await _ticks(shipper)
            await shipper.close()

        asyncio.run(play())
        part = q.logs.stored_log(jid, 1, 0, 1 << 30)
        assert part.done and part.data == log.read_bytes()


def test_a_new_daemon_finishes_the_logs_the_last_one_left_unfinished(pg_url, tmp_path):
    with Queue(pg_url) as q:
        jid, quiet = q.enqueue(["x"]), q.enqueue(["y"])
        (tmp_path / f"{jid}.1.log").write_bytes(b"first part, second part\n")
        pg_logs.append(q.engine.store.db, jid, 1, "a", b"first part, ", 0, False)  # the last daemon got this far
        pg_logs.append(q.engine.store.db, quiet, 1, "b", b"", 0, False)  # another machine's: not ours to finish
        worker = SimpleNamespace(host="a", name="me", running={})
        shipper = LogShipper(pg_url, options_for(10), worker, lambda j, a: tmp_path / f"{j}.{a}.log", 1 << 20)
        asyncio.run(_ticks(shipper, 2))
        asyncio.run(shipper.close())
        assert q.logs.stored_log(jid, 1).data == b"first part, second part\n" and q.logs.stored_log(jid, 1).done
        assert not q.logs.stored_log(quiet, 1).done


def test_a_job_that_printed_nothing_gets_an_empty_finished_log(pg_url, tmp_path):
    with Queue(pg_url) as q:
        jid = q.enqueue(["x"])
        q.claim("me")
        worker = SimpleNamespace(host="a", name="me", running={})
        shipper = LogShipper(pg_url, options_for(10), worker, lambda j, a: tmp_path / f"{j}.{a}.log", 1 << 20)
        shipper.job_changed(q.get(jid))  # it ran and ended between two ticks
        asyncio.run(_ticks(shipper))
        asyncio.run(shipper.close())
        part = q.logs.stored_log(jid, 1)
        assert (part.data, part.done) == (b"", True)


# ---------------------------------------------------------------- wakeups
def test_notify_tells_listeners_of_queued_jobs_and_cancels(pg_url):
    heard: list[Any] = []

    async def play() -> None:
        listener = Listener(pg_url, options_for(10), on_jobs=lambda: heard.append("jobs"),
                            on_cancel=lambda i: heard.append(i))
        task = asyncio.get_running_loop().create_task(listener.run())
        await _until(lambda: listener.connected and heard == ["jobs"])  # a connect is a wake-up too
        with Queue(pg_url) as q:
            a = q.enqueue(["a"])
            await _until(lambda: heard.count("jobs") == 2)
            job = q.claim("w")
            q.heartbeat(a, job.token)
            q.cancel(a)
            await _until(lambda: a in heard)
            with psycopg.connect(pg_url, autocommit=True) as c:
                c.execute("NOTIFY sloth_cancel, 'not a number'")  # anyone may NOTIFY: it is ignored
            b = q.enqueue(["b"], not_before=2e11)  # delayed: daemons learn its due time
            await _until(lambda: heard.count("jobs") == 3)
            listener.revalidate()  # after a resume: a new connection, and a look for work
            await _until(lambda: heard.count("jobs") == 4 and listener.connected)
            del b
        assert heard == ["jobs", "jobs", a, "jobs", "jobs"]  # the claim and renewal said nothing
        listener.close()
        await asyncio.wait_for(task, 10)

    asyncio.run(play())


async def _until(pred: Any, timeout_s: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not pred():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.01)


# ----------------------------------------------------------------- network
def test_a_server_that_cannot_be_reached_fails_the_next_calls_at_once(monkeypatch):
    conn = pgdb.Connection("postgresql://nobody@127.0.0.1:1/x", pgdb.PgOptions(reconnect_s=0.1,
                                                                             retry_after_s=60), lambda: None)
    tries: list[int] = []
    real = conn._connect_once
    monkeypatch.setattr(conn, "_connect_once", lambda: tries.append(1) or real())
    with pytest.raises(StorageError, match="cannot connect"):
        conn.read(lambda c: None, "reading")
    n = len(tries)
    with pytest.raises(StorageError, match="cannot connect"):
        conn.read(lambda c: None, "reading")
    assert len(tries) == n  # no new attempt within retry_after_s
    conn.revalidate()  # a resume: try again at once
    with pytest.raises(StorageError):
        conn.read(lambda c: None, "reading")
    assert len(tries) > n


# ----------------------------------------------------------------- schema
def _daemon(url: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLOTH_")}
    env.update(SLOTH_HOME=str(home), SLOTH_QUEUE_URL=url)
    return subprocess.run([sys.executable, "-m", "sloth_daemon", "daemon", "run"], env=env, capture_output=True,
                          text=True, timeout=60)


def test_a_daemon_refuses_a_schema_it_does_not_know(pg_fresh, home):
    older = pg_fresh(migrated=False)
    with pgdb.opened(older) as c:
        from sloth_daemon.backends.postgres import migrate as pg_migrate

        pg_migrate.migrate(c, target=3)
    p = _daemon(older, home / "h1")
    latest = pg_migrate.SCHEMA_VERSION  # never a number here: each new migration moves it
    assert p.returncode != 0 and f"schema v3; this sloth needs v{latest}" in p.stderr and "sloth db migrate" in p.stderr
    newer = pg_fresh()
    with psycopg.connect(newer, autocommit=True) as c:
        c.execute("INSERT INTO sloth.migrations (version, name) VALUES (99, 'from_the_future')")
    p = _daemon(newer, home / "h2")
    assert p.returncode != 0 and "newer than this sloth knows" in p.stderr and "Upgrade sloth" in p.stderr


def test_db_migrate_and_status(pg_fresh, home):
    url = pg_fresh(migrated=False)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLOTH_")}
    env.update(SLOTH_HOME=str(home / "h"), SLOTH_QUEUE_URL=url)

    def sloth(*args: str) -> Any:
        p = subprocess.run([sys.executable, "-m", "sloth_daemon", *args, "--json"], env=env, capture_output=True,
                           text=True, timeout=60, check=True)
        return json.loads(p.stdout)

    st = sloth("db", "status")
    assert (st["schema"]["current"], st["identity"], st["hosts"]) == (0, None, [])
    from sloth_daemon.backends.postgres import migrate as pg_migrate

    latest = pg_migrate.migrations()[-1]  # never a number here: each new migration moves it
    assert st["schema"]["pending"][-1] == latest.name
    assert sloth("db", "migrate")["after"] == latest.version
    st = sloth("db", "status")
    assert st["schema"]["pending"] == [] and len(st["identity"]) == 16
    assert sloth("db", "migrate")["before"] == latest.version  # again: nothing to do
