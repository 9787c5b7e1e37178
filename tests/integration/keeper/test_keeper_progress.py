"""Progress and cost on a real keeper over its real socket (issue 31):
a job that reports progress on every one of thousands of lines wakes the
daemon about once a second, never once a line, and the last value is the
one said; an exited run's outcome carries its cost, in the journal too
(what a keeper restarted for a new daemon offers)."""

from __future__ import annotations

import sys
import time

from tests.support.keeper_rig import wait_for

FLOOD = ("import sys, time\n"
         "t0 = time.monotonic()\n"
         "i = 0\n"
         "while time.monotonic() - t0 < 2.5:\n"
         "    i += 1\n"
         "    print(f'row {i}')\n"
         "    print(f'SLOTH_PROGRESS {min(i / 10**9, 1):.9f}')\n"
         "print('SLOTH_PROGRESS 0.99', flush=True)\n"
         "sys.stderr.write(f'{i} lines\\n')\n")


def test_a_flood_of_progress_lines_sends_about_one_event_a_second(rig):
    rig.start()
    w = rig.wire()
    w.hello()
    t0 = time.monotonic()
    w.call("spawn", **rig.job("p", sys.executable, "-c", FLOOD))
    out = w.event("exited", "p", timeout_s=30)["outcome"]
    took = time.monotonic() - t0
    said = [e for e in w.events if e["kind"] == "progress" and e["key"] == "p"]
    lines = int(rig.log_of("p").rsplit(b"\n", 2)[-2].split()[0])
    assert lines > 5000, lines  # thousands of progress lines were printed ...
    assert 1 <= len(said) <= took / 1.0 + 2, (len(said), took)  # ... and about one event a second went
    assert said[-1]["progress"]["source"] == "line"
    cost = out["cost"]
    assert cost["covers"] == "rusage" and cost["ended"] == "exit 0" and cost["cpu_s"] > 0.5
    assert cost["peak_rss_bytes"] > 1 << 20 and 2.0 < cost["wall_s"] < took + 1


def test_the_last_value_is_told_and_none_after_the_end(rig):
    rig.start()
    w = rig.wire()
    w.hello()
    w.call("spawn", **rig.job("q", "sh", "-c", "echo 'SLOTH_PROGRESS 0.1'; echo 'SLOTH_PROGRESS 0.7'; sleep 1.5"))
    seen = [w.event("progress", "q")["progress"]["fraction"]]
    if seen[-1] != 0.7:  # the first may go at once; the latest follows within a second
        seen.append(w.event("progress", "q")["progress"]["fraction"])
    assert seen[-1] == 0.7 and len(seen) <= 2
    assert w.hello()["runs"][0]["progress"]["fraction"] == 0.7  # a new daemon hears it with the run
    w.event("exited", "q")
    time.sleep(1.2)  # a progress event held back by the rate limit would come by now
    w.hello()  # a round trip: whatever was sent before its answer is read
    assert not [e for e in w.events if e["kind"] == "progress"]


def test_the_cost_is_journalled_with_the_outcome(rig):
    rig.start()
    w = rig.wire()
    w.hello()
    w.call("spawn", **rig.job("c", "sh", "-c", "exit 3"))
    out = w.event("exited", "c")["outcome"]
    assert out["cost"]["ended"] == "exit 3"
    path = rig.paths.keeper_journal
    wait_for(lambda: path.exists() and b'"cost"' in path.read_bytes(), what="the cost in the journal")
