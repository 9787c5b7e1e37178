"""The keeper's watchdogs (keeper/watchdog.py) and the --fail-on guard
(checks.fail_on_pattern): lines as the job prints them, in any chunks; a
pattern the guard takes is fast on the worst line; one it refuses is slow."""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from sloth_daemon.checks import FAIL_ON_LINE_BYTES, fail_on_pattern
from sloth_daemon.errors import FieldError
from sloth_daemon.keeper import watchdog
from sloth_daemon.keeper.watchdog import Watch

# Near the guard's cap, each with the line that is worst for it (no match: every start backtracks)
TAKEN = [r"\d{1,8}.*nan", r"[a-z]+x", r"error.*fatal", r"(foo|bar)?\w{1,30}!", r"^.*Traceback",
         r"loss: (nan|inf)", r"(?i)cuda error: .{0,100}out of memory", r"a{0,50}a{0,50}b"]
WORST = ["1" * FAIL_ON_LINE_BYTES, "a" * FAIL_ON_LINE_BYTES, "error " * (FAIL_ON_LINE_BYTES // 6),
         "foo" * (FAIL_ON_LINE_BYTES // 3), "cuda error: " + " " * 500]


@pytest.mark.parametrize("pattern", TAKEN)
def test_a_pattern_the_guard_takes_is_fast_on_the_worst_line(pattern):
    p = re.compile(fail_on_pattern(pattern))
    t = time.perf_counter()
    for line in WORST:
        p.search(line[:FAIL_ON_LINE_BYTES])
    assert time.perf_counter() - t < 0.5  # measured ~ms each on a loaded machine; 1e3x below the refused


@pytest.mark.parametrize("pattern, why", [
    (r"(a|aa)*b", "a repeated group"),  # exponential: minutes on 30 characters
    (r"(ab)+x", "a repeated group"),
    (r".*.*.*x", "may take too long"),  # cubic and worse: 50 s on 1 KiB
    (r"\d+.*nan", "may take too long"),  # two unbounded: bound one (\d{1,8})
    (r"(a)\1", "backreferences"),
    ("x" * 201, "at most 200"),
    ("(", "is not a regular expression"),
    # an atomic group hid its body from the guard: (?>(a|aa)*c) took 0.4 s on 28 characters, for ever on 512
    (r"(?>(a|aa)*c)", "a repeated group"),
    (r"(?>.*.*.*x)", "may take too long"),
])
def test_a_costly_or_bad_pattern_is_refused_saying_why(pattern, why):
    with pytest.raises(FieldError, match=re.escape(why)):
        fail_on_pattern(pattern)


def run_watch(chunks: list[bytes], fail_on: str, *, budget: float | None = None) -> tuple[list, list]:
    ended, notes = [], []

    async def go() -> None:
        w = Watch(None, fail_on, end=lambda why, by: ended.append((why, by)), note=notes.append)
        w.start()
        for c in chunks:
            w.output(c)

    if budget is not None:
        old, watchdog.MATCH_BUDGET_S = watchdog.MATCH_BUDGET_S, budget
    try:
        asyncio.run(go())
    finally:
        if budget is not None:
            watchdog.MATCH_BUDGET_S = old
    return ended, notes


def test_lines_are_matched_whole_across_chunks_and_carriage_returns_end_lines():
    ended, _ = run_watch([b"epoch 1 lo", b"ss: 0.3\nepoch 2 lo", b"ss: n", b"an\r"], "loss: nan")
    assert ended == [("matched --fail-on 'loss: nan': epoch 2 loss: nan", "match")]
    assert run_watch([b"loss: na", b"\n", b"n\n"], "loss: nan") == ([], [])  # two lines, neither matches
    assert run_watch([b"loss: nan"], "loss: nan") == ([], [])  # an unfinished line is not matched yet


def test_a_long_line_is_matched_on_its_first_bytes_only():
    line = b"x" * FAIL_ON_LINE_BYTES + b" boom\n"
    assert run_watch([line], "boom") == ([], [])
    assert run_watch([b"boom " + b"x" * 10_000 + b"\n"], "boom")[0][0][1] == "match"


def test_matching_that_costs_too_much_is_switched_off_and_said():
    ended, notes = run_watch([b"abc\n"] * 3 + [b"boom\n"], "boom", budget=0.0)
    assert ended == [] and len(notes) == 1 and "--fail-on switched off for this run" in notes[0]


def test_output_keeps_the_stall_away_and_silence_ends_the_run():
    ended: list = []

    async def go() -> None:
        w = Watch(0.2, None, end=lambda why, by: ended.append((why, by)), note=lambda m: None)
        w.start()
        for _ in range(4):  # 0.4 s of output every 0.1 s: no stall
            await asyncio.sleep(0.1)
            w.output(b"tick\n")
        assert ended == []
        await asyncio.sleep(0.5)

    asyncio.run(go())
    assert ended == [("stalled: no output for 0.2s", "stall")]
