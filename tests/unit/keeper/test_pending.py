"""keeper/pending.py: a run pending behind another that cannot be started
for a reason nobody foresaw ends unstarted, said, and the chain goes on:
the error must not escape into the SIGCHLD hook that settles the run in
front (its own exit would then never be told: a hang)."""

from __future__ import annotations

from sloth_daemon.keeper.kept_run import KeptRun, Launch
from sloth_daemon.keeper.pending import PendingRuns
from sloth_daemon.errors import SpawnError
from sloth_daemon.keeper.wire import Journal


def run(key: str) -> KeptRun:
    return KeptRun(key=key, job_id=int(key[1:]), attempt=1, token=key, log_path="/dev/null", started_at=0.0)


def launch() -> Launch:
    return Launch(argv=["true"], env={}, cwd=None, log_path="/dev/null", log_cap=1024, timeout_s=None)


def test_an_unforeseen_error_starting_a_pending_run_ends_it_unstarted_and_the_next_starts(tmp_path):
    runs = {k: run(k) for k in ("r1", "r2", "r3")}
    started: list[str] = []

    def start(r: KeptRun, ln: Launch) -> None:
        if r.key == "r2":
            raise RuntimeError("nobody foresaw this")
        started.append(r.key)

    p = PendingRuns(runs, Journal(tmp_path / "journal"), start)
    assert p.wait_behind(runs["r2"], {"after": "r1"}, launch())
    assert p.wait_behind(runs["r3"], {"after": "r2"}, launch())
    runs["r1"].state = "exited"
    moved = p.start_next(runs["r1"])
    assert [r.key for r in moved] == ["r2", "r3"] and started == ["r3"]
    out = runs["r2"].outcome
    assert runs["r2"].state == "exited" and out is not None and not out["started"]
    assert "internal error" in out["reason"] and "nobody foresaw this" in out["reason"], out
    assert out["spawn_error"] == {"retry": False, "resource": False}


def test_a_spawn_error_still_says_its_own_reason(tmp_path):
    runs = {k: run(k) for k in ("r1", "r2")}

    def start(r: KeptRun, ln: Launch) -> None:
        raise SpawnError("command not found: nope", retry=False)

    p = PendingRuns(runs, Journal(tmp_path / "journal"), start)
    p.wait_behind(runs["r2"], {"after": "r1"}, launch())
    runs["r1"].state = "exited"
    p.start_next(runs["r1"])
    assert runs["r2"].outcome["reason"] == "command not found: nope"  # type: ignore[index]
