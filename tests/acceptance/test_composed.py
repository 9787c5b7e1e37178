"""How the round-3 features compose (edits, holds, gates, pauses,
schedules), through the real daemon: what one branch checks at add must
hold when another branch's command changes the job later."""

from __future__ import annotations

import pytest

from tests.support.harness import TEST_CONFIG

pytestmark = pytest.mark.acceptance


def test_edit_into_a_lane_too_small_for_the_jobs_slots_is_refused(make_harness):
    """`add --slots 3 --lane tiny` (tiny runs 1) is refused: it would never
    start; `edit --lane tiny` of a held --slots 3 job must be too, and
    change nothing."""
    h = make_harness(TEST_CONFIG + "[lanes]\nbig = 3\ntiny = 1\n")
    h.start()
    jid = h.add("true", lane="big", slots=3, hold=True)
    p = h.cli("edit", str(jid), "--lane", "tiny")
    assert p.returncode != 0, p.stdout + p.stderr
    assert "would never start" in p.stderr
    assert h.job(jid)["lane"] == "big"
    assert "edited" not in [e["kind"] for e in h.events(jid)]
    h.cli("release", str(jid), check=True)
    h.wait_state(jid, "done", timeout_s=20)
