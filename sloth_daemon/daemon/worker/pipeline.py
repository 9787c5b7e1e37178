"""Pipelining: a lane's next job waits in the keeper.

Without it a burst of short jobs pays a round trip per job: the keeper
reaps one and tells the daemon, the daemon claims the next and asks the
keeper, the keeper forks it. With it the daemon is off that path: when
every slot of a lane is in use and one of its runs R is young (heard
started less than HOT_S ago: a burst), the worker claims the lane's next
due job J as usual and asks the spawner to start J the moment R ends
(``SpawnRequest.after``). Meanwhile J is *pending*:

- it holds its claim but no slot (Attempt.pending): a lane never runs more
  processes than its concurrency; once R has ended J counts (it is
  starting, or its start failed and its outcome says so);
- HOT_S stretches with the lane's usual run time (``hot_s``: HOT_FACTOR x
  its smoothed run time, HOT_MAX_S at most), as heard by the daemon, and a
  head not yet heard started (its spawn sent, the keeper busy) counts as
  young for HOT_MAX_S after its claim: on a loaded machine the keeper takes
  30-270 ms to start and report a `true`, and with a fixed HOT_S from the
  claim a fifth of all successors were taken back (instrumented, 3 daemons:
  92% of the take-backs were behind a head not yet heard started);
- only in a lane whose last run ended within hot_s of its start (or that
  has had none yet): a burst of jobs a little longer than HOT_S would
  otherwise have each successor claimed and taken back again, two write
  transactions and a keeper round trip each, for nothing (measured with
  80 ms jobs: 40% more daemon CPU per job);
- one successor per run, ever, and only behind a run the spawner heard of
  first (started, or its spawn sent straight out);
- a pending run may have a successor too, DEPTH deep at most: a job as
  short as `true` ends before the worker could hear of its start and send
  the next, so with one the keeper still waited for the worker every other
  job (measured: 70% of successors came after their predecessor had
  ended); with several the worker has several jobs' time to answer. A
  paced turn comes every 6-7 ms in a burst of `true` (the pace, its own
  work, and its commit before the spawns go out) while the keeper gets
  through a job in ~1.5-2 ms: 4 deep, the keeper ran dry before 24% of
  its starts (instrumented, 1,000 jobs); 8 deep, before 2%. Now the keeper
  gets through a `true` in ~1.2 ms and a turn carries more: 8 deep, the
  time from one job's exit to the next one's fork (perf sched, 1,000 jobs,
  1 slot) was over 1.5 ms before 16% of the starts, 3.2 ms each on
  average with a CPU idle for most of it (the keeper waiting for the
  worker's turn and its fsync): a third of the wall time. So a chain is as
  deep as HOLD_S of the lane's usual run (``depth_cap``), DEPTH_MIN to
  DEPTH: 64 `true` in hand, and a lane of 50 ms jobs still holds only
  DEPTH_MIN, so a shared queue's other workers are not kept from a
  chain's jobs for long; a lane whose runs were never heard holds DEPTH_MIN;
- while the keeper holds pending runs the worker paces its turns (PACE_S
  between them): each turn then records a few outcomes and claims a few
  successors in one transaction (recording.py) instead of one of each per
  turn, a fifth less daemon CPU per job in a burst of `true`
  (tests/bench/bench_ab.py); the keeper has DEPTH jobs in hand meanwhile.
  Pacing only while every chain was two or more deep (so one nearer its
  end got the next turn at once) was measured worse: 8% more wall time,
  10% more daemon CPU (8 interleaved pairs). A lone job is never paced:
  nothing is pending, and a run that ends with nothing behind it (its
  slot ran dry: the end of a burst, or a chain the worker did not refill
  in time) ends the pace at once (``ran_dry``): the last outcome of a
  burst of 1,000 `true` waited up to PACE_S for it. PACE_S was 3 ms while a chain held 8 `true` (~10 ms
  of work); with HOLD_S in hand a 10 ms pace never lets the keeper run
  dry and a turn carries ~7 jobs: the daemon's CPU per job in a burst of
  1,000 `true` on 1 slot 0.74 ms against 3 ms's 0.93 (4 interleaved
  rounds), wall 1.46-1.63 s against 1.49-2.14; 20 ms saved little more
  CPU (0.70) and the outcomes are heard later;
- if the run at the head of a chain (the one that runs) still runs hot_s
  after it started, the chain is taken back: the spawner drops each run
  that has not started (it is withdrawn: withdrawal.py) and the queue gets it back as if
  never claimed (``unclaim``: nothing ran, nothing in its history); if the
  head ended first, its successor started and is an ordinary run. So a
  long job holds successors for hot_s (HOT_MAX_S) at most;
- on a shared queue (PostgreSQL) a chain's depth is judged again each
  turn: what it holds beyond its lane's depth_cap now (the lane's runs
  heard longer since it was claimed) is taken back the same way, the last
  first. A chain claimed 64 deep while its lane ran `true` otherwise held
  jobs that turned out 45 ms long (young each, under hot_s) for 2.9 s: one
  daemon ran 63 of 64 such jobs while another's slot stood idle (1.6 s
  with the tail given back: 32 each). Not on SQLite, where no other
  machine waits for them: in a lane of `true` with every tenth job 45 ms
  long the tail went back and was claimed again after each long one,
  15% more daemon CPU and 9% more wall time for nothing;
- pause, a lane's concurrency changed, a settings reload and a daemon
  stopping take pending runs back at once; a cancel, a kill and a daemon
  stopping first ask the spawner to withdraw every run not heard started
  and record only once it answered (withdrawal.py): the keeper decides
  whether a pending run starts, never the daemon's guess; a fence or a lost
  lease drops one in the spawner, which reports it ended unstarted
  (outcomes.py gives it back, or leaves it cancelled).

Only where the spawner pipelines (a keeper that knows ``after``) and the
queue can unclaim (both backends; PostgreSQL since issue 34).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Collection, Iterable

from sloth_daemon.clock import ClockReadings, Clocks
from sloth_daemon.daemon.worker.lanes import Lanes
from sloth_daemon.daemon.worker.lifecycle import Attempt, Stage
from sloth_daemon.daemon.worker.runs import Attempts
from sloth_daemon.daemon.worker.signals import Signals
from sloth_daemon.daemon.worker.spawner import Outcome

if TYPE_CHECKING:
    from sloth_daemon.queue import Queue
    from sloth_daemon.daemon.worker.spawner import Spawner
    from sloth_daemon.daemon.worker.withdrawal import Withdrawals

HOT_S = 0.05  # a run younger than this may get a successor; a successor pending longer is taken back ...
HOT_FACTOR, HOT_MAX_S = 4.0, 0.5  # ... or than HOT_FACTOR x the lane's usual run, up to HOT_MAX_S (hot_s)
DEPTH = 64  # pending runs behind one that runs, at most ...
DEPTH_MIN, HOLD_S = 8, 0.2  # ... as many as make HOLD_S of the lane's usual run, DEPTH_MIN at least
PACE_S = 0.010  # between the worker's turns while runs are pending (see the docstring)
TAKE_BACK_WAIT_S = 2.0  # a daemon stopping waits this long at most to hear its successors taken back


class Pipeline:
    """Holds a lane's next job in the spawner (see the module docstring).

    State: which lanes' last run was short (``short_lanes``) and the counts
    for status. Collaborators: the queue (claims successors under the
    worker's ``name`` and ``places``), the spawner (``unspawn``), the
    worker's runs and lanes, the clocks, the withdrawals (a stopping
    daemon's take-back) and signals (a run taken back wakes the loop)."""

    def __init__(self, queue: "Queue", spawner: "Spawner", running: Attempts, lanes: Lanes, clocks: Clocks,
                 withdrawals: "Withdrawals", signals: Signals, *, name: str, places: list[str] | None) -> None:
        self.queue, self.spawner, self.running, self.lanes = queue, spawner, running, lanes
        self.clocks, self.withdrawals, self.signals = clocks, withdrawals, signals
        self.name, self.places = name, places
        # other machines claim from it: a chain's tail beyond depth_cap goes back (take_back_due)
        self.shared = queue.machines is not None
        self.short_lanes: dict[str, bool] = {}  # lane -> whether its last run ended within hot_s of its start
        self.usual_s: dict[str, float] = {}  # lane -> its runs' usual time, start to end as heard (smoothed)
        self.pending_n = 0  # runs sent to wait behind another, since start
        self.taken_back_n = 0  # ... of which taken back unstarted

    def paced(self) -> bool:
        """Should the next turn wait PACE_S: the keeper holds runs to start."""
        return any(r.pending for r in self.running.values())

    def ran_dry(self, run: Attempt) -> bool:
        """Will ``run``'s end leave its slot with nothing to start (no
        successor, or one that ended unstarted)? Then the next turn is not
        paced: its lane may have work to claim, and a waiter its outcome.
        Asked before its end is taken in: a pending run dropped unstarted
        hands its successor on (unlink), which still starts."""
        succ = run.successor
        return succ is None or succ.outcome is not None

    def pipelines(self) -> bool:
        return bool(getattr(self.spawner, "pipelines", False))

    def may_lead(self, run: Attempt, awake: float, used: dict[str, int]) -> bool:
        """May ``run`` get a successor now: young, alone, in a full lane that
        runs, and known to the spawner -- started, or its spawn sent straight
        out (not pending itself, no earlier process of its job to end first),
        so the spawner hears of it before of its successor?"""
        lane = run.job.lane
        # Not one being withdrawn: the spawner may have dropped it already,
        # and a spawn after a run it does not know starts at once.
        sent = run.live or (run.stage is Stage.CLAIMED and run.job.runner is None)
        return (sent and run.ending is None and run.successor is None and not run.adopted
                and depth(run) < self.depth_cap(lane) and awake < self._take_back_at(run)
                and self.short_lanes.get(lane, True)
                and not self.lanes.is_paused(lane) and used.get(lane, 0) >= self.lanes.concurrency(lane))

    def claim_successors(self, r: ClockReadings, begin: Callable[[Attempt, ClockReadings], None],
                         skip_lanes: Collection[str] = ()) -> None:
        """Behind each run that may lead, the next due job of its lane (and
        behind that one, the next: DEPTH), each handed to ``begin`` (the
        worker's start of a run it claimed). Only while the worker may claim;
        never in ``skip_lanes`` (held for a job waiting for slots: gates.py)."""
        if not self.pipelines():
            return
        used = self.running.slots_in_use()
        chains: dict[str, list[Attempt]] = {}  # lane -> its runs that may lead
        for x in self.running.values():
            if x.job.lane not in skip_lanes and self.may_lead(x, r.awake, used):
                chains.setdefault(x.job.lane, []).append(x)
        for lane, tails in chains.items():
            # a lane's successors in one statement (no read-only look first: in a burst there is
            # work, and the look costs), as many as its chains have room for (DEPTH deep), dealt
            # out a level at a time: every chain gets its next before any gets two
            # each tail with its depth, counted once (a chain is DEPTH long: walking it per job dealt
            # was DEPTH^2 steps a turn)
            levels = [(t, depth(t)) for t in tails]
            cap = self.depth_cap(lane)
            jobs = self.queue.claim_many(self.name, sum(cap - d for _, d in levels), lane=lane,
                                         places=self.places)[::-1]  # taken from the end: the claim's order
            while jobs:
                levels = [(t, d) for t, d in levels if d < cap]
                if not levels:  # never (as many as there was room for): not left claimed with no run
                    for job in reversed(jobs):
                        self.queue.unclaim(job.id, job.token or "")
                    break
                for i, (run, d) in enumerate(levels):
                    if not jobs:
                        break
                    job = jobs.pop()
                    self.pending_n += 1
                    run.successor = Attempt(job, job.token or "", job.attempts, after=run)
                    begin(run.successor, r)
                    levels[i] = (run.successor, d + 1)

    # ----------------------------------------------------------- taking back
    def take_back_due(self, awake: float) -> None:
        """Chains whose head is no longer young, and what a chain holds
        beyond its lane's depth_cap now: see the module docstring."""
        for run, at in reversed(self._pending_with_deadlines()):  # the last first: the keeper need not move
            if awake >= at:                                             # the others up
                self.take_back_run(run)
        if self.shared:
            for run in reversed(self._beyond_cap()):
                self.take_back_run(run)

    def _beyond_cap(self) -> list[Attempt]:
        """The pending runs (as ``_pending``) deeper in their chain than their
        lane's depth_cap now, in chain order: a chain claimed DEPTH deep
        while the lane ran `true` holds jobs that turned out longer for up
        to DEPTH x hot_s, away from a shared queue's other machines."""
        out: list[Attempt] = []
        for first in self.running.values():
            if first.pending or first.successor is None:
                continue  # not a chain's head
            cap, n = self.depth_cap(first.job.lane), 0
            run: Attempt | None = first.successor
            while run is not None and run.pending:
                if run.stage is Stage.CLAIMED and run.ending is None:  # one being withdrawn counts no more
                    n += 1
                    if n > cap:
                        out.append(run)
                run = run.successor
        return out

    def take_back(self, lanes: Iterable[str] | None = None) -> None:
        """Every pending run (of ``lanes``): it must not start after a pause
        or a change of the lane's concurrency."""
        wanted = None if lanes is None else set(lanes)
        for run in reversed(self._pending()):
            if wanted is None or run.job.lane in wanted:
                self.take_back_run(run)

    async def take_back_all(self) -> None:
        """Before a daemon leaves its jobs to the keeper: what has not
        started goes back to the queue, not on to run with no daemon (the
        keeper decides what has not: withdrawal.py)."""
        pending = [r for r in self.running.values() if r.pending]
        await self.withdrawals.wait(self.withdrawals.ask(pending), TAKE_BACK_WAIT_S)

    def take_back_deadlines(self, awake: float) -> list[float]:
        return [at - awake for _, at in self._pending_with_deadlines()]

    def run_ended(self, run: Attempt) -> None:
        """Its process ended, or it was dropped before it started (then the
        run behind it moves up: unlink)."""
        unlink(run)
        if run.pid is not None and not run.adopted:
            lane, took = run.job.lane, self.clocks.read().awake - run.started_awake
            self.short_lanes[lane] = took < self.hot_s(lane)
            usual = self.usual_s.get(lane)
            self.usual_s[lane] = took if usual is None else usual + (took - usual) / 4

    def depth_cap(self, lane: str) -> int:
        """How many runs of ``lane`` may wait behind the one that runs: about
        HOLD_S of the lane's usual run, DEPTH_MIN to DEPTH. A lane whose runs'
        time is not known yet: DEPTH_MIN."""
        usual = self.usual_s.get(lane)
        if usual is None:
            return DEPTH_MIN
        return DEPTH if usual * DEPTH <= HOLD_S else max(DEPTH_MIN, int(HOLD_S / usual))

    def hot_s(self, lane: str) -> float:
        """How young a run of ``lane`` must be to get a successor, and how
        long one waits behind it before it is taken back: HOT_S, or
        HOT_FACTOR times the lane's usual run if longer (at most HOT_MAX_S).
        On a loaded machine a `true` is heard running 30-100 ms (the keeper
        and the daemon wait for a CPU): with a fixed HOT_S its successors
        were claimed and taken back again, a claim and an unclaim each (8%
        of a daemon's samples, a fifth of the successors in a run of three
        daemons); the usual run stretches with the load, and so does this."""
        usual = self.usual_s.get(lane)
        return HOT_S if usual is None else min(HOT_MAX_S, max(HOT_S, HOT_FACTOR * usual))

    def on_taken_back(self, run: Attempt) -> None:
        """The spawner dropped it unstarted: give its claim back (settle)."""
        if run.outcome is None:
            self.taken_back_n += 1
            run.ended(Outcome(None, reason="taken back before it started", started=False))
            unlink(run)
        self.signals.wake()

    def _pending(self) -> list[Attempt]:
        return [r for r in self.running.values() if r.pending and r.stage is Stage.CLAIMED and r.ending is None]

    def _pending_with_deadlines(self) -> list[tuple[Attempt, float]]:
        """Each pending run (as ``_pending``) with when its chain is no longer
        young, each chain's head found once (a walk from every run of a
        DEPTH-long chain to its head was DEPTH^2 steps, twice a turn)."""
        heads: dict[int, Attempt] = {}  # id() of a pending run -> its chain's head
        out = []
        for run in self._pending():
            path, x = [], run
            while x.pending and x.after is not None and id(x) not in heads:
                path.append(x)
                x = x.after
            first = heads.get(id(x), x)
            for y in path:
                heads[id(y)] = first
            out.append((run, self._young_until(first, run.job.lane)))
        return out

    def _take_back_at(self, run: Attempt) -> float:
        return self._young_until(head(run), run.job.lane)

    def _young_until(self, first: Attempt, lane: str) -> float:
        """When a chain whose head is ``first`` is no longer young: its head's
        hot_s after it was heard started; one not heard started yet (its spawn
        sent, the keeper busy) HOT_MAX_S after it was claimed."""
        return first.started_awake + (self.hot_s(lane) if first.pid is not None else HOT_MAX_S)

    def take_back_run(self, run: Attempt) -> None:
        """Ask the spawner to drop ``run`` if it has not started (it hears ``taken_back``)."""
        run.withdraw()  # asked again if it was (an adoption: the keeper may not have heard)
        self.spawner.unspawn(run.token)

    # ---------------------------------------------------------------- status
    def pending_status(self) -> list[dict[str, object]]:
        """Runs waiting in the spawner (``after``: the job whose run they wait for)."""
        return [{"id": r.job.id, "attempt": r.attempt, "lane": r.job.lane,
                 "after": r.after.job.id if r.after else None}
                for r in self.running.values() if r.pending]

    def status(self) -> dict[str, object]:
        return {"enabled": self.pipelines(), "hot_s": HOT_S, "depth": DEPTH, "held": self.pending_n,
                "taken_back": self.taken_back_n,
                "hot_now_s": {lane: round(self.hot_s(lane), 4) for lane in sorted(self.usual_s)},
                "depth_now": {lane: self.depth_cap(lane) for lane in sorted(self.usual_s)},
                "usual_s": {lane: round(self.usual_s[lane], 5) for lane in sorted(self.usual_s)}}


def unlink(run: Attempt) -> None:
    """A pending run ended without starting (taken back, cancelled, fenced, its
    start failed): the run behind it now waits for the one it waited for,
    as in the spawner (keeper/pending.py), so it still counts as pending (no
    slot, heartbeats, taken back in time)."""
    if run.pid is not None or run.after is None:
        return
    succ = run.successor
    if succ is not None and succ.after is run:
        succ.after = run.after
        run.after.successor = succ  # one successor ever: the dropped one's place, not a new one
    run.successor = None


def head(run: Attempt) -> Attempt:
    """The run a pending run's chain waits for (the one that runs)."""
    while run.pending and run.after is not None:
        run = run.after
    return run


def depth(run: Attempt) -> int:
    """How many runs of its chain wait before ``run`` starts (0: it is not pending)."""
    n = 0
    while run.pending and run.after is not None:
        run, n = run.after, n + 1
    return n
