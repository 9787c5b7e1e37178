"""`sloth wait` asks the daemon for SHOWN_FIELDS only (the wait's
``fields``): every line it writes from a job -- the outcome lines (a
failure's log tail too), the live line of one job in each state it can be
in, the counts of many, the summaries -- must read nothing else, or it
fails with a KeyError (``job[...]``) or says less than it should
(``job.get(...)``) on a terminal. Each is made here from jobs that carry
every field, with every field a line reads recorded."""

from __future__ import annotations

import io
import time
from typing import Any

import pytest

from sloth_daemon.cli import render
from sloth_daemon.cli.progress_view import batch_summary
from sloth_daemon.cli.wait import SHOWN_FIELDS, _View, _claimed_at
from sloth_daemon.daemon.streams import WIRE_FIELDS


class Reads(dict):  # type: ignore[type-arg]
    """A job whose reads are recorded (``read``), whatever way they come."""

    read: set[str] = set()

    def __getitem__(self, k: str) -> Any:
        Reads.read.add(k)
        return super().__getitem__(k)

    def get(self, k: str, default: Any = None) -> Any:
        Reads.read.add(k)
        return super().get(k, default)


def job(jid: int, state: str, **over: Any) -> Reads:
    now = time.time()
    whole: dict[str, Any] = dict.fromkeys(WIRE_FIELDS)
    whole.update(id=jid, state=state, attempts=0, max_attempts=3, tries=0, not_before=now - 1, created_at=now - 5,
                 command=["true"], lane="default", paused=False, message=None)
    whole.update(over)
    return Reads(whole)


NOW = time.time()
STATES = [
    job(1, "queued"),
    job(1, "queued", gate={"when": "ac"}, wait_reason="waiting for mains power"),
    job(1, "queued", not_before=NOW + 60),
    job(1, "queued", attempts=1, tries=1, message="exit 3", not_before=NOW + 30),  # "will be tried again in"
    job(1, "queued", attempts=1, tries=1, message="exit 3", gate={"when": "ac"}, wait_reason="on battery"),
    job(1, "held"),
    job(1, "blocked", message="after job 7"),
    job(1, "running", attempts=1, paused=True, message="paused by hand"),
    job(1, "running", attempts=1, progress={"fraction": 0.4, "eta_s": 30.0, "source": "job"}),
    job(1, "done", attempts=1, exit_code=0, message="exit 0"),
    job(1, "failed", attempts=2, tries=2, exit_code=3, message="exit 3"),
    job(1, "cancelled", message="cancelled by request"),
]


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("SLOTH_HOME", str(tmp_path))  # a failure's log tail is read from here (none: no lines)
    Reads.read = set()


@pytest.mark.parametrize("j", STATES, ids=[f"{i}-{dict.__getitem__(j, 'state')}" for i, j in enumerate(STATES)])
def test_one_job_is_shown_from_the_fields_sloth_wait_asks_for(j, monkeypatch):
    from sloth_daemon.cli import connection

    asked = []
    monkeypatch.setattr(connection, "call", lambda op, **a: asked.append(a) or {"job": dict(j), "events": []})
    view = _View([1], io.StringIO(), live=False, quiet=False)
    view.update([j], initial=True)
    view._reread()  # the ticker's: a queued job with a gate, due, is read again for why it waits
    raw = dict(j)  # not recorded: the test's own reads
    assert bool(asked) == (raw["state"] == "queued" and bool(raw["gate"]) and raw["not_before"] <= time.time())
    _claimed_at(j)  # a job running before the wait, on a terminal: when its attempt was claimed (_started)
    view.running_since = time.time() - 3  # as the live line sets it on a terminal (_started)
    lines = [view.line()]
    view.update([j])
    lines += [render.outcome(j), str(view.counts())]
    if j["state"] in ("done", "failed", "cancelled"):
        lines.append(batch_summary([j]))  # the summary (_View.close): of the jobs as they ended
    assert lines and Reads.read <= {"id", "state", *SHOWN_FIELDS}, Reads.read - {"id", "state", *SHOWN_FIELDS}


def test_many_jobs_and_the_summaries_are_shown_from_those_fields():
    jobs = [job(i, dict.__getitem__(s, "state"), **{k: v for k, v in s.items() if k not in ("id", "state")})
            for i, s in enumerate(STATES, 1)]
    Reads.read = set()
    view = _View([j["id"] for j in jobs], io.StringIO(), live=False, quiet=False)
    view.update(jobs, initial=True)
    view.line()
    batch_summary([j for j in jobs if j["state"] in ("done", "failed", "cancelled")])  # the summary: ended jobs
    assert Reads.read <= {"id", "state", *SHOWN_FIELDS}, Reads.read - {"id", "state", *SHOWN_FIELDS}


def test_every_field_sloth_wait_asks_for_is_one_the_daemon_sends():
    """Else a daemon of this version refuses the wait (an unknown field) and
    the CLI does not fall back (BadRequest, not a ProtocolError)."""
    assert set(SHOWN_FIELDS) <= set(WIRE_FIELDS)
