"""Where the daemon puts the jobs it is given, in-process: on one machine's
queue (SQLite) every job runs here, so `--on` another machine is refused;
on a shared queue a job runs where it was queued unless it says otherwise.
And the settings that make a machine one of several."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sloth_daemon import config
from sloth_daemon.clock import ManualClocks
from sloth_daemon.config import Settings
from sloth_daemon.daemon.control import Control
from sloth_daemon.errors import BadRequest, ConfigError
from sloth_daemon.daemon.handlers import Handlers, Session
from sloth_daemon.daemon.worker.lanes import Lanes
from sloth_daemon.paths import resolve
from sloth_daemon.queue import Queue
from sloth_daemon.daemon.worker.loop import Worker
from tests.unit.daemon.test_handlers import op
from tests.unit.daemon.test_worker import FakeSpawner


@pytest.fixture
def rig(tmp_path: Path):
    def make(*, shared: bool) -> tuple[Handlers, Queue]:
        clocks = ManualClocks()
        paths = resolve({"SLOTH_HOME": str(tmp_path)})
        settings = Settings(tags=("gpu",))
        q = Queue(paths.db, clocks)
        made.append(q)
        w = Worker(q, settings, FakeSpawner(), clocks=clocks, log_path=paths.job_log, instance="t", host="lap",
                   places=["", "lap", "gpu"] if shared else None)
        c = Control(q, w, FakeSpawner(), paths, settings, request_stop=lambda *a, **k: None, instance="t")
        if shared:
            c.shared = SimpleNamespace(status=lambda: {"hosts": []})
        return Handlers(c, {}), q

    made: list[Queue] = []
    yield make
    for q in made:
        q.close()


def places(h: Handlers, q: Queue, jobs: list[dict[str, Any]], *, staged: bool) -> list[str]:
    """The places the daemon gave these jobs (by the add op, or staged then committed)."""
    if staged:
        session = Session()
        h.session_ops["stage"]({"jobs": jobs}, session)
        res = asyncio.run(h.session_ops["commit"]({"batch": "tok"}, session))
    else:
        res = op(h, "add", {"jobs": jobs})
    return [q.get(i).place for i in res["ids"]]


@pytest.mark.parametrize("staged", [False, True], ids=["add", "stage-commit"])
def test_one_machine_s_queue_runs_every_job_here(rig, staged):
    h, q = rig(shared=False)
    got = places(h, q, [{"command": ["a"]}, {"command": ["b"], "place": "*"}, {"command": ["c"], "place": "lap"},
                        {"command": ["d"], "place": "gpu"}], staged=staged)
    assert got == ["", "", "lap", "gpu"]
    with pytest.raises(BadRequest, match="this machine's alone") as e:
        places(h, q, [{"command": ["x"]}, {"command": ["y"], "place": "desk"}], staged=staged)
    assert "PostgreSQL" in (e.value.hint or "")
    assert q.counts()["queued"] == 4  # all or none: nothing of the refused batch


@pytest.mark.parametrize("staged", [False, True], ids=["add", "stage-commit"])
def test_a_shared_queue_runs_a_job_where_it_was_queued_unless_told(rig, staged):
    h, q = rig(shared=True)
    got = places(h, q, [{"command": ["a"]}, {"command": ["b"], "place": "*"}, {"command": ["c"], "place": "desk"}],
                 staged=staged)
    assert got == ["lap", "", "desk"]


def test_pauses_on_a_shared_queue_are_each_machine_s_own(tmp_path):
    with Queue(tmp_path / "q.db", ManualClocks()) as q:
        lap, desk = Lanes(q, Settings(), host="lap"), Lanes(q, Settings(), host="desk")
        lap.pause(None)
        assert Lanes(q, Settings(), host="lap").paused_all and not Lanes(q, Settings(), host="desk").paused_all
        assert not Lanes(q, Settings()).paused_all and not desk.paused_all


# ------------------------------------------------------------------ config
def test_the_settings_of_one_machine_of_several(tmp_path):
    s = config.from_mapping({"queue_url": "postgresql://me:secret@db/sloth", "host": "lap", "tags": ["gpu", "gpu"],
                             "listen": False, "poll_s": "2s"}, tmp_path / "c.toml")
    assert (s.host, s.tags, s.listen, s.poll_s) == ("lap", ("gpu",), False, 2.0)
    assert s.as_dict()["settings"]["queue_url"]["value"] == "postgresql://me:***@db/sloth"  # never shown
    assert config.queue_target(s, tmp_path / "q.db", {}) == "postgresql://me:secret@db/sloth"
    assert config.queue_target(Settings(), tmp_path / "q.db", {}) == tmp_path / "q.db"
    env = {"SLOTH_QUEUE_URL": "postgres://other/db"}
    assert config.queue_target(Settings(), tmp_path / "q.db", env) == "postgres://other/db"
    with pytest.raises(ConfigError, match="SLOTH_QUEUE_URL must be"):
        config.queue_target(Settings(), tmp_path / "q.db", {"SLOTH_QUEUE_URL": "sqlite:///x"})
    changed = config.changes(Settings(), s)
    assert "queue_url: '' -> 'postgresql://me:***@db/sloth' (takes effect when the daemon restarts)" in changed


@pytest.mark.parametrize("bad", [{"host": "my laptop"}, {"host": 3}, {"tags": "gpu"}, {"tags": ["a:b"]},
                                 {"queue_url": "mysql://x"}, {"listen": "yes"}, {"poll_s": "0s"}])
def test_bad_machine_settings_are_refused_with_the_file_named(tmp_path, bad):
    with pytest.raises(ConfigError, match="c.toml"):
        config.from_mapping(bad, tmp_path / "c.toml")
