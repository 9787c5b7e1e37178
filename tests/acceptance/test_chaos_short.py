"""The chaos soak (tests/chaos_soak.py) in its short mode: a few hundred probe
jobs from several clients while the daemon is kill -9ed, SIGSTOPped, made to
"sleep" (fake clock jumps), has job processes killed under it and garbage
thrown at its socket; and, in the middle of bursts of quick jobs, batches and
whole lanes cancelled, running and held jobs killed, `sloth daemon stop` and
start; the keeper SIGSTOPped past its runs' leases; config.toml replaced by a
FIFO, a link to /dev/zero, garbage or a huge number and reloaded; a too-short
lease asked for. Then every invariant must hold: nothing lost or duplicated,
never two runs of a job at once, no cancelled job started after its cancel
was answered, no finished run run again (save after a reboot), every job
final, attempts and events consistent, no daemon re-issuing its own job's
lease, no daemon exit other than our kill -9s and stops, no hang.

Random by design; the seed is printed (rerun it with
``python tests/chaos_soak.py --short --seed N``) and can be pinned with
SLOTH_SOAK_SEED.
"""

import os

import pytest

from tests.chaos_soak import SoakConfig, run_soak

pytestmark = pytest.mark.acceptance


@pytest.mark.timeout(300)
def test_chaos_short_keeps_every_invariant(capsys):
    seed = os.environ.get("SLOTH_SOAK_SEED")
    res = run_soak(SoakConfig.short(seed=int(seed) if seed else None, log=lambda s: None))
    report = res.report()
    with capsys.disabled():
        print("\n" + report)
    assert not res.violations, report
    f = res.figures
    # the chaos really happened, and the work really ran
    assert f["kills"] >= 1 and f["stops"] >= 1 and f["job_kills"] + f.get("job_kill_no_target", 0) >= 1
    assert f["bad_frames"] >= 1
    assert f.get("cancel_rounds", 0) + f.get("kill_rounds", 0) >= 1 and f.get("bursts", 0) >= 3
    assert f.get("daemon_stops", 0) >= 1 and f.get("keeper_stops", 0) >= 1 and f.get("config_swaps", 0) >= 1
    assert any(k.startswith("lease floor ") for k in f)
    assert f["lost"] == 0 and f["duplicates"] == 0 and f["overlaps"] == 0 and f["collisions"] == 0
    assert f["cancelled_then_ran"] == 0 and f["finished_reruns"] == 0
    assert f["states"].get("done", 0) > 0 and f["starts"] >= f["jobs"] - f.get("cancelled_by_cancel", 0) \
        - f.get("cancelled_by_lane", 0) - f.get("cancelled_by_kill", 0) - f.get("cancelled_by_floor", 0)
