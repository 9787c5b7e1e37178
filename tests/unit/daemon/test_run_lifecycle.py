"""A worker's run moves between stages only as lifecycle.MOVES allows
(daemon/worker/lifecycle.py); every other move raises. Clocks are passed in."""

from __future__ import annotations

import itertools

import pytest

from sloth_daemon.clock import ClockReadings
from sloth_daemon.daemon.worker.lifecycle import (
    MOVES, NOT_STARTED, Ending, IllegalRunMove, Attempt, Stage, Why,
)
from sloth_daemon.daemon.worker.spawner import Outcome
from sloth_daemon.models import Job, JobState


def job(jid: int = 1) -> Job:
    return Job(id=jid, command=["true"], state=JobState.RUNNING, attempts=1, max_attempts=3, lease_until=100.0,
               not_before=0.0, token=f"t{jid}", worker="w", message="", created_at=0.0, updated_at=0.0, lease_s=30.0)


def run_at(stage: Stage, jid: int = 1) -> Attempt:
    """A run brought to ``stage`` by legal moves only."""
    run = Attempt(job(jid), f"t{jid}", 1)
    path = {
        Stage.CLAIMED: [], Stage.WITHDRAWING: [run.withdraw], Stage.RUNNING: [lambda: run.started(7, 1.0)],
        Stage.PAUSED: [lambda: run.started(7, 1.0), lambda: run.set_paused(True)],
        Stage.ENDED: [lambda: run.ended(Outcome(0))],
        Stage.WRITTEN: [lambda: run.ended(Outcome(0)), lambda: run.written(None)],
        Stage.SYNCING: [lambda: run.ended(Outcome(0)), lambda: run.written(None), run.syncing],
        Stage.DONE: [lambda: run.ended(Outcome(0)), lambda: run.written(None), run.done],
    }[stage]
    for step in path:
        step()
    assert run.stage is stage
    return run


def move(run: Attempt, to: Stage) -> None:
    """The one transition method that leads to ``to``."""
    {
        Stage.CLAIMED: lambda: run._move(Stage.CLAIMED),
        Stage.WITHDRAWING: lambda: run._move(Stage.WITHDRAWING),
        Stage.RUNNING: lambda: run.started(8, 2.0) if run.stage in NOT_STARTED else run._move(Stage.RUNNING),
        Stage.PAUSED: lambda: run._move(Stage.PAUSED),
        Stage.ENDED: lambda: run.ended(Outcome(1)) if run.stage not in (Stage.WRITTEN,)
        else run.unwritten("disk full", 5.0),
        Stage.WRITTEN: lambda: run.written(None),
        Stage.SYNCING: run.syncing,
        Stage.DONE: run.done,
    }[to]()


@pytest.mark.parametrize("src,dst", list(itertools.product(Stage, Stage)), ids=lambda s: s.value)
def test_every_move_is_legal_or_raises(src: Stage, dst: Stage) -> None:
    run = run_at(src)
    if dst in MOVES[src]:
        move(run, dst)
        assert run.stage is dst
    else:
        with pytest.raises(IllegalRunMove, match=f"{src.value} -> {dst.value}"):
            move(run, dst)
        assert run.stage is src  # refused: nothing changed


def test_every_stage_reachable_and_done_is_the_only_end() -> None:
    seen, todo = {Stage.CLAIMED}, [Stage.CLAIMED]
    while todo:
        for nxt in MOVES[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    assert seen == set(Stage)
    assert [s for s in Stage if not MOVES[s]] == [Stage.DONE]


def test_started_carries_its_process_and_when() -> None:
    run = run_at(Stage.WITHDRAWING)  # the keeper had started it before the withdrawal reached it
    run.started(42, awake=12.5)
    assert (run.pid, run.started_awake, run.live) == (42, 12.5, True)


def test_withdraw_is_asked_once() -> None:
    run = run_at(Stage.CLAIMED)
    assert run.withdraw() is True and run.withdraw() is False and run.stage is Stage.WITHDRAWING


def test_pause_follows_the_keeper_and_an_ended_run_stays_ended() -> None:
    run = run_at(Stage.RUNNING)
    run.set_paused(True)
    assert run.paused and run.live
    run.set_paused(True)  # the keeper's word again (an adoption): no move
    run.ended(Outcome(0))
    run.set_paused(False)  # the resume's answer came after the end
    assert run.stage is Stage.ENDED and not run.paused


def test_stop_keeps_the_first_reason_and_kills_only_what_runs() -> None:
    run = run_at(Stage.RUNNING)
    assert run.stop(Ending(Why.CONDITION_LOST, "waiting for mains power")) is True
    assert run.stop(Ending(Why.CANCELLED)) is False
    assert run.ending == Ending(Why.CONDITION_LOST, "waiting for mains power")
    assert run.ending.text == "condition lost: waiting for mains power"
    assert not run.renews  # no heartbeat for a run being ended
    ended = run_at(Stage.ENDED)
    assert ended.stop(Ending(Why.CANCELLED)) is False and ended.ending == Ending(Why.CANCELLED)  # written as cancelled
    written = run_at(Stage.WRITTEN)
    assert written.stop(Ending(Why.CANCELLED)) is False and written.ending is None  # as written


def test_ending_texts() -> None:
    assert Ending(Why.LEASE_LOST).text == "lease lost"
    assert Ending(Why.FENCED, "its lease was lost while the machine slept").text.startswith("fenced: ")
    assert Ending(Why.REPLACED, "replaced by the next occurrence of schedule s").text == \
        "replaced by the next occurrence of schedule s"


def test_pending_while_its_predecessor_has_not_ended() -> None:
    head, succ = run_at(Stage.RUNNING, 1), run_at(Stage.CLAIMED, 2)
    succ.after, head.successor = head, succ
    assert succ.pending and succ.renews and not head.pending
    head.ended(Outcome(0))
    assert not succ.pending  # starting now: it counts


def test_a_write_refused_waits_for_its_retry_time_on_the_injected_clock() -> None:
    run = run_at(Stage.ENDED)
    assert run.due_to_write(awake=0.0)
    run.postpone_write("database is locked", awake=10.0)
    assert not run.due_to_write(10.2) and run.due_to_write(10.5)
    run.written(None)
    run.unwritten("the unit was not kept", awake=20.0)  # second try: a longer wait
    assert run.stage is Stage.ENDED and not run.due_to_write(20.9) and run.due_to_write(21.0)
    assert run.record_tries == 2 and run.record_error == "the unit was not kept"
    run.cancelling = True
    assert not run.due_to_write(100.0)  # a cancel writes it


def test_renewed_a_third_into_the_lease_by_the_boot_clock() -> None:
    run = run_at(Stage.RUNNING)
    run.renewed(ClockReadings(wall=1e9, awake=50.0, total=70.0))
    assert run.renew_at == 70.0 + 30.0 / 3
