"""The keeper exits once it holds no run (issue 34 item 1): after
``keeper_linger_s`` with nothing held, the daemon tells it bye; the next
job starts another. A spawn that comes while the old keeper is leaving
waits, unsent, until it is gone and the new one has said hello: none is
refused, failed or run twice, however the two cross.

Real daemon, real keepers, real job processes; a linger of 200-300 ms.
"""

from __future__ import annotations

import random
import threading
import time

from tests.support.harness import TEST_CONFIG, Harness, alive

LINGER_S = 0.2


def lingering(make_harness, linger: str = "200ms") -> Harness:
    return make_harness(TEST_CONFIG + f'keeper_linger_s = "{linger}"\n')


def keeper_now(h: Harness) -> int | None:
    return h.call("status")["keeper"]["pid"]


def starts(h: Harness) -> int:
    """Keepers started on this home (each says so once in the keeper log)."""
    logs = list(h.home.rglob("keeper.log"))
    assert len(logs) == 1, logs
    return logs[0].read_text(errors="replace").count(" listening on ")


def test_the_keeper_stays_while_it_holds_a_run_exits_after_and_the_next_job_starts_another(make_harness):
    h = lingering(make_harness, "300ms")
    h.start()
    first = keeper_now(h)
    assert first is not None  # the daemon starts with one (it adopts what a keeper holds)
    jid = h.add("sleep", "1.2")  # runs four lingers long: the keeper must stay through it
    h.wait_state(jid, "running")
    assert keeper_now(h) == first and alive(first)
    h.wait_state(jid, "done")
    h.wait_for(lambda: not alive(first), timeout_s=10, what="the idle keeper gone")
    status = h.call("status")["keeper"]
    assert status["pid"] is None and status["idle"] and status["problem"] is None, status
    shown = h.cli("daemon", "status", check=True).stdout
    assert "none (it exits once it holds no job; the next job starts one)" in " ".join(shown.split()), shown

    again = h.add("sh", "-c", "echo back")
    assert h.wait_state(again, "done")["attempts"] == 1
    assert starts(h) == 2  # a second keeper ran it
    assert "back" in h.cli("logs", str(again), check=True).stdout
    assert "lost the connection to the keeper" not in h.log_text()  # let go, not lost


def test_spawns_hammered_around_the_linger_each_start_once_on_a_keeper_that_stays(make_harness):
    """Jobs added at random moments around the instant the keeper is let
    go (a linger, plus or minus): each runs exactly once, first try."""
    h = lingering(make_harness)
    h.start()
    rng = random.Random(34)
    ids: list[int] = []
    errors: list[BaseException] = []

    def add_around_the_linger() -> None:
        try:
            for _ in range(40):
                ids.append(h.add("true"))
                h.wait_state(ids[-1], "done", "failed", "queued")  # claimed and maybe ended; then the gap
                time.sleep(rng.uniform(LINGER_S * 0.5, LINGER_S * 1.6))
        except BaseException as e:  # noqa: BLE001 - reported by the test's thread
            errors.append(e)

    adders = [threading.Thread(target=add_around_the_linger) for _ in range(2)]
    for t in adders:
        t.start()
    for t in adders:
        t.join(120)
    assert not errors, errors
    for jid in ids:
        job = h.wait_state(jid, "done", "failed")
        assert job["state"] == "done" and job["attempts"] == 1, (job, h.events(jid))
    assert starts(h) >= 3, "the keeper was let go and started again, several times"
    log = h.log_text()
    assert "no keeper to start the job" not in log and "cannot start the keeper" not in log, log
    assert "lost the connection to the keeper" not in log, log


def test_a_reload_shortens_the_linger_of_a_keeper_lingering_now(make_harness):
    h = lingering(make_harness, "10m")
    h.start()
    keeper = keeper_now(h)
    h.wait_state(h.add("true"), "done")
    time.sleep(LINGER_S * 2)
    assert keeper_now(h) == keeper and alive(keeper)  # ten minutes to go
    (h.home / "config.toml").write_text(TEST_CONFIG + 'keeper_linger_s = "200ms"\n')
    assert "keeper_linger_s" in h.cli("daemon", "reload", check=True).stdout
    h.wait_for(lambda: not alive(keeper), timeout_s=10, what="the keeper let go on the new linger")
