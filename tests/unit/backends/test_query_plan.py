"""Query plan guard: claim() and next_due_at() stay index seeks, whatever the data.

The SQL checked here is read from the module-level constants of the SQLite
modules that run it (pick, enqueue, deps, reads), and
a trace of real claim()/next_due_at()/enqueue() calls checks that those
constants are exactly the SELECTs that run. Work is measured in SQLite VM
steps (progress handler), never in seconds.
"""

from __future__ import annotations

import re

import pytest

import sloth_daemon.backends.sqlite.deps as D
import sloth_daemon.backends.sqlite.enqueue as E
import sloth_daemon.backends.sqlite.pick as P
import sloth_daemon.backends.sqlite.reads as R
from sloth_daemon.clock import ManualClock
from sloth_daemon.queue import Queue

NOW = 1_000_000.0
HOUR = 3600.0

# constant name -> (sample parameters, the partial index it must use)
GUARDED = {
    "SQL_LANE_FIRST": ((), "jobs_due"),
    "SQL_LANE_NEXT": (("a",), "jobs_due"),
    "SQL_PRIO_MAX": (("a",), "jobs_ready"),
    "SQL_PRIO_BELOW": (("a", 5), "jobs_ready"),
    "SQL_READY_AT_PRIO": (("a", 5, NOW), "jobs_ready"),
    "SQL_READY_MANY_AT_PRIO": (("a", 5, NOW, 8), "jobs_ready"),  # claim_many
    "SQL_EXPIRED": ((NOW,), "jobs_lease"),
    "SQL_FIRST_DUE_IN_LANE": (("a",), "jobs_due"),
    "SQL_LEASES": ((), "jobs_lease"),
    "SQL_ACTIVE_KEY": (("k",), "jobs_active_key"),
    "SQL_ACTIVE_KEYS": (("k",), "jobs_active_key"),  # every unfinished job with a key (--on-dup, issue 33)
    # a job's end settles what waits for it: by the deps table's keys, never a scan
    "SQL_UNFINISHED_PREREQ": ((1,), r"PRIMARY KEY \(job_id=\?\)"),
    "SQL_STATE_OF": ((1,), "INTEGER PRIMARY KEY"),
    "SQL_BY_ID": ((1,), "INTEGER PRIMARY KEY"),
    # jobs with a gate (issue 24): a skip scan over the gates, seeks into each (gate, lane)
    "SQL_GATE_FIRST": ((), "jobs_gated"),
    "SQL_GATE_NEXT": (("g",), "jobs_gated"),
    "SQL_GATE_LANE": (("g", ""), "jobs_gated"),
    "SQL_GATE_PRIO_MAX": (("g", "a"), "jobs_gated"),
    "SQL_GATE_PRIO_BELOW": (("g", "a", 5), "jobs_gated"),
    "SQL_GATE_FIRST_AT_PRIO": (("g", "a", 5), "jobs_gated"),
}


def populate(q: Queue, clock: ManualClock, n: int, *, finished_share: float = 0.0) -> None:
    """n jobs: most delayed an hour at a higher priority (the trap), a few due at
    priority 0 in three lanes, some leases live and some expired, and
    ``finished_share`` of them done."""
    clock.set(NOW - 1000)
    specs = []
    for i in range(n):
        if i % 50 == 0:
            specs.append({"command": ["due", str(i)], "lane": "abc"[i % 3]})
        else:
            specs.append({"command": ["later", str(i)], "lane": "a", "priority": 5 + i % 3,
                          "not_before": NOW + HOUR, "key": f"k{i}" if i % 7 == 0 else None})
    q.enqueue_many(specs)
    for _ in range(10):
        q.claim("old", lease_s=10)  # expired by NOW
    for _ in range(10):
        q.claim("live", lease_s=10 * HOUR)
    if finished_share:
        q.engine.store.conn.execute(
            "UPDATE jobs SET state = 'done', finished_at = ? WHERE state = 'queued' AND id % 100 < ?",
            (NOW - 500, int(finished_share * 100)),
        )
    clock.set(NOW)


@pytest.fixture(scope="module")
def dbs(tmp_path_factory):
    made = {}

    def get(kind: str) -> Queue:
        if kind not in made:
            clock = ManualClock(NOW)
            q = Queue(tmp_path_factory.mktemp("plan") / "queue.db", clock)
            if kind != "empty":
                populate(q, clock, 20_000, finished_share=0.9 if kind.startswith("finished") else 0)
            if kind.endswith("+analyze"):
                q.engine.store.conn.execute("ANALYZE")
            made[kind] = q
        return made[kind]

    yield get
    for q in made.values():
        q.close()


def plan(q: Queue, sql: str, params) -> list[str]:
    return [r[3] for r in q.engine.store.conn.execute("EXPLAIN QUERY PLAN " + sql, params)]


@pytest.mark.parametrize("kind", ["empty", "delayed", "delayed+analyze", "finished+analyze"])
@pytest.mark.parametrize("name", sorted(GUARDED))
def test_statement_uses_its_partial_index(dbs, kind, name):
    params, index = GUARDED[name]
    q = dbs(kind)
    lines = plan(q, _sql(name), params)
    text = "\n".join(lines)
    assert re.search(rf"USING (COVERING )?(INDEX )?{index}", text), text
    assert "SCAN " not in text, text
    assert "TEMP B-TREE" not in text, text
    assert all(ln.startswith("SEARCH") for ln in lines), text


@pytest.mark.parametrize("kind", ["empty", "delayed+analyze"])
@pytest.mark.parametrize("name", ["SQL_PROMOTE", "SQL_CANCEL_NEEDING"])
def test_settling_dependents_finds_them_by_the_deps_index(dbs, kind, name):
    """A job's end touches only what waits for it: never a scan of jobs or deps."""
    text = "\n".join(plan(dbs(kind), getattr(D, name), {"ended": 1, "now": NOW, "why": ""}))
    assert "deps_after" in text and "SCAN" not in text, text


def test_naive_index_would_scan_the_delayed_rows(dbs):
    """Sanity check of the guard: the trap query the partial indexes avoid is a
    range scan over every delayed row, and that is visible in the VM step count."""
    q = dbs("delayed")
    naive = ("SELECT id FROM jobs INDEXED BY naive WHERE state = 'queued' AND not_before <= ?"
             " ORDER BY priority DESC, not_before LIMIT 1")
    q.engine.store.conn.execute("CREATE INDEX naive ON jobs(state, priority, not_before)")
    try:
        assert vm_steps(q, lambda: q.engine.store.conn.execute(naive, (NOW,)).fetchone()) > 10 * vm_steps(
            q, lambda: P._best_queued(q.engine.store.conn, NOW, None))
    finally:
        q.engine.store.conn.execute("DROP INDEX naive")


# ------------------------------------------------------- what really runs
_LITERAL = r"(?:'(?:[^']|'')*'|-?[0-9][0-9.e+-]*|NULL)"


def _pattern(sql: str) -> re.Pattern:
    return re.compile(re.escape(sql).replace(r"\?", _LITERAL) + r"\Z")


def traced_selects(q: Queue, fn) -> list[str]:
    seen: list[str] = []
    q.engine.store.conn.set_trace_callback(seen.append)
    try:
        fn()
    finally:
        q.engine.store.conn.set_trace_callback(None)
    return [s for s in seen if s.lstrip().upper().startswith("SELECT") and " jobs" in s]


def test_claim_next_due_and_keyed_enqueue_run_only_guarded_selects(tmp_path):
    clock = ManualClock(NOW)
    q = Queue(tmp_path / "queue.db", clock, max_attempts=1)
    try:
        populate(q, clock, 300)
        patterns = [_pattern(_sql(n)) for n in GUARDED]
        calls = [
            lambda: q.claim("w"),  # fails expired last-attempt leases, then claims
            lambda: q.claim("w", lanes=["b", "c"]),
            lambda: q.claim("w", lanes=["nope"]),
            lambda: q.claim_many("w", 3, lane="a"),
            lambda: q.next_due_at(),
            lambda: q.next_due_at(["a"]),
            lambda: q.enqueue(["x"], key="k7"),
            lambda: q.enqueue_many([{"command": ["y"], "key": "new"}, {"command": ["z"]}]),
            lambda: q.enqueue_many([{"command": ["p"], "lane": "dep"}, {"command": ["d"], "after_previous": "after"}]),
            lambda: (j := q.claim("w", lanes=["dep"])) and q.complete(j.id, j.token or ""),
            lambda: q.retry(q.cancel(q.enqueue(["r"], lane="dep")).id),
            lambda: q.retry(q.cancel(q.enqueue(["rk"], key="rk")).id),  # a retry checks the key is free
            lambda: q.enqueue_many([{"command": ["g"], "when": ["ac"], "priority": 3, "not_before": NOW + HOUR},
                                    {"command": ["h"], "when": ["ac"]}]),
            lambda: q.gated_heads(q.gates()),
            lambda: q.claim("w", gated=(q.gated_heads(q.gates())[0][0].id, None)),
        ]
        kinds = set()
        for call in calls:
            for sql in traced_selects(q, call):
                matched = [p for p in patterns if p.match(sql)]
                assert matched, f"unguarded SELECT on jobs: {sql}"
                kinds.add(matched[0].pattern)
        assert len(kinds) == len(GUARDED)  # and every guarded statement did run
    finally:
        q.close()


# ---------------------------------------------------------------- work
def vm_steps(q: Queue, fn) -> int:
    """SQLite VM instructions (in units of 100) spent in fn: a clock-free cost."""
    n = [0]

    def tick() -> int:
        n[0] += 1
        return 0

    q.engine.store.conn.set_progress_handler(tick, 100)
    try:
        fn()
    finally:
        q.engine.store.conn.set_progress_handler(None, 0)
    return n[0]


@pytest.mark.parametrize("analyze", [False, True])
def test_claim_work_does_not_grow_with_delayed_rows(tmp_path, analyze):
    costs = {}
    for n in (500, 20_000):
        clock = ManualClock(NOW)
        q = Queue(tmp_path / f"q{n}.db", clock, lease_s=60)
        try:
            populate(q, clock, n)
            if analyze:
                q.engine.store.conn.execute("ANALYZE")
            claim = vm_steps(q, lambda: [q.claim("w") for _ in range(5)])
            nxt = vm_steps(q, lambda: [q.next_due_at() for _ in range(5)])
            keyed = vm_steps(q, lambda: [q.enqueue(["x"], key=f"n{i}") for i in range(5)])
            costs[n] = (claim, nxt, keyed)
        finally:
            q.close()
    small, big = costs[500], costs[20_000]
    # 40x the rows; a scan of them would cost > 40x. Index seeks grow with log n.
    for what, s, b in zip(("claim", "next_due_at", "keyed enqueue"), small, big):
        assert b <= 2 * s + 20, (what, costs)


def _sql(name: str) -> str:
    """A guarded statement by name, from whichever SQLite module runs it."""
    for module in (P, E, D, R):
        if hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(name)


def test_jobs_waiting_on_a_gate_cost_a_claim_and_a_worker_look_nothing(tmp_path):
    """20,000 jobs at a higher priority waiting for mains power (issue 24):
    out of the claim indexes, so a claim, a due time and the worker's list
    of gates cost what they cost without them."""
    costs = {}
    for gated in (0, 20_000):
        clock = ManualClock(NOW)
        q = Queue(tmp_path / f"g{gated}.db", clock, lease_s=60)
        try:
            populate(q, clock, 500)
            q.enqueue_many([{"command": ["g", str(i)], "when": ["ac"], "priority": 9} for i in range(gated)])
            costs[gated] = (vm_steps(q, lambda: [q.claim("w") for _ in range(5)]),
                            vm_steps(q, lambda: [q.next_due_at() for _ in range(5)]),
                            vm_steps(q, lambda: [q.gates() for _ in range(5)]))
        finally:
            q.close()
    for what, none, many in zip(("claim", "next_due_at", "gates"), costs[0], costs[20_000]):
        assert many <= 2 * none + 20, (what, costs)
