"""Results handed on (issue 33 item 3), on the real daemon and keeper
through the real CLI, on both engines: a job writes JSON to the file named
in $SLOTH_RESULT; the keeper reads it once the run ends (keeper/results.py),
it is kept with its attempt, shown by `show`, `show --json` and `sloth
result ID`, and handed to --after/--after-any dependents in the file named
in $SLOTH_AFTER_RESULTS (daemon/worker/handing.py), also across a daemon
killed -9 between the two jobs.
"""

from __future__ import annotations

import json
import time

import pytest

from sloth_daemon.keeper.results import RESULT_CAP
from tests.support.engines import ENGINES, add_id, started_on
from tests.support.harness import Harness

pytestmark = pytest.mark.acceptance


@pytest.fixture(params=ENGINES)
def h(request, make_harness) -> Harness:
    """A started daemon with quick retries, on a SQLite file or a PostgreSQL queue."""
    return started_on(request, make_harness)


add = add_id


def test_a_result_is_kept_shown_and_handed_to_dependents(h, tmp_path):
    seen = tmp_path / "seen.json"
    ok = add(h, "--label", "train", "-s", """printf '{"acc": 0.91, "name": "r\\u00e9sum\\u00e9"}' > "$SLOTH_RESULT" """)
    bad = add(h, "--max-attempts", "1", "-s", """echo '{"loss": "nan"}' > "$SLOTH_RESULT"; exit 3""")
    quiet = add(h, "--", "true")
    dep = add(h, "--after", str(ok), "--after-any", f"{bad},{quiet}", "-s", f'cat "$SLOTH_AFTER_RESULTS" > {seen}')
    assert h.wait_state(dep, "done", "failed", "cancelled", timeout_s=30)["state"] == "done"

    assert json.loads(h.cli("result", str(ok), check=True).stdout) == {"acc": 0.91, "name": "résumé"}
    assert json.loads(h.cli("result", str(bad), check=True).stdout) == {"loss": "nan"}  # a failed try's too
    handed = json.loads(seen.read_text())
    assert handed == [
        {"id": ok, "need": "done", "state": "done", "exit_code": 0, "attempt": 1, "label": "train",
         "result": {"acc": 0.91, "name": "résumé"}},
        {"id": bad, "need": "end", "state": "failed", "exit_code": 3, "attempt": 1, "label": None,
         "result": {"loss": "nan"}},
        {"id": quiet, "need": "end", "state": "done", "exit_code": 0, "attempt": 1, "label": None, "result": None},
    ]
    (shown,) = h.cli_json("show", str(ok))["jobs"]
    assert [(r["attempt"], r["result"]) for r in shown["results"]] == [(1, {"acc": 0.91, "name": "résumé"})]
    assert 'result    attempt 1: {"acc": 0.91, "name": "résumé"}' in h.cli("show", str(ok), check=True).stdout

    none = h.cli("result", str(quiet))
    assert none.returncode == 1 and none.stdout == "" and f"job {quiet} has no result from attempt 1" in none.stderr
    unknown = h.cli("result", "999999")
    assert unknown.returncode == 4 and unknown.stdout == ""
    assert h.cli("result", str(ok), "--attempt", "2").returncode == 2


def test_results_handed_to_one_job_are_capped_in_all_and_those_left_out_say_so(h, tmp_path):
    """A job may wait for 2,000 others, each handing on 64 KiB: 128 MiB built and written in the daemon
    as its run was claimed. Past HANDED_CAP a result is left out, and its object says so."""
    from sloth_daemon.daemon.worker.handing import HANDED_CAP

    seen = tmp_path / "seen.json"
    each = 60_000
    n = HANDED_CAP // (each + 2) + 3
    ids = h.cli_json("add", "--range", f"1-{n}", "--json", "--shell", "--",
                     f"{{ printf '\"'; head -c {each} /dev/zero | tr '\\0' a; printf '\"'; }} > \"$SLOTH_RESULT\"; : {{}}")["ids"]
    dep = add(h, "--after-any", ",".join(map(str, ids)), "-s", f'cat "$SLOTH_AFTER_RESULTS" > {seen}')
    assert h.wait_state(dep, "done", "failed", "cancelled", timeout_s=120)["state"] == "done"
    handed = json.loads(seen.read_text())
    assert [x["id"] for x in handed] == ids and all(x["state"] == "done" for x in handed)
    given = [x for x in handed if x["result"] is not None]
    assert len(given) == HANDED_CAP // (each + 2) and all(len(x["result"]) == each for x in given)
    assert [x.get("left_out") for x in handed[len(given):]] == [True] * 3
    assert len(json.loads(h.cli("result", str(ids[-1]), check=True).stdout)) == each  # still kept


def test_sloth_result_prints_json_a_script_reads_whatever_characters_the_result_holds(h):
    """A C1 control (U+009B, a terminal's CSI) was shown escaped for the terminal as `\\x9b`, which
    is no JSON: `sloth result ID | jq` failed."""
    job = add(h, "-s", """printf '{"x": "\\u009b31m \\u202e \\u001b]0;t\\u0007 r\\u00e9sum\\u00e9"}' > "$SLOTH_RESULT" """)
    assert h.wait_state(job, "done", "failed", timeout_s=30)["state"] == "done"
    out = h.cli("result", str(job), check=True).stdout
    assert json.loads(out) == {"x": "\u009b31m \u202e \u001b]0;t\u0007 r\u00e9sum\u00e9"}
    assert out.isascii() and "\x1b" not in out and "\x9b" not in out  # nothing that drives a terminal


def test_a_result_that_cannot_be_kept_is_said_and_changes_no_outcome(h, tmp_path):
    big = RESULT_CAP + 1
    cases = {
        "not JSON": """echo '{"acc": 0.9' > "$SLOTH_RESULT" """,
        f"larger than {RESULT_CAP // 1024} KiB": f"""head -c {big} /dev/zero | tr '\\0' 1 > "$SLOTH_RESULT" """,
        "is a symbolic link": f"""echo '{{}}' > {tmp_path}/x; ln -s {tmp_path}/x "$SLOTH_RESULT" """,
        "NaN or Infinity": """echo '[NaN]' > "$SLOTH_RESULT" """,
        # 950 deep was kept, and then `show --json` of the job could not be parsed back by Python's json
        "more than 100 deep": """python3 -c 'print("["*950+"]"*950)' > "$SLOTH_RESULT" """,
    }
    ids = {why: add(h, "-s", cmd) for why, cmd in cases.items()}
    for why, job in ids.items():
        done = h.wait_state(job, "done", "failed", timeout_s=30)
        assert done["state"] == "done", (why, done)  # the outcome is the run's, not the result's
        assert "result not kept: $SLOTH_RESULT" in done["message"] and why in done["message"], (why, done["message"])
        assert h.cli("result", str(job)).returncode == 1


def test_results_survive_a_daemon_killed_between_the_two_jobs(h, tmp_path):
    seen = tmp_path / "seen.json"
    go = tmp_path / "go"
    first = add(h, "-s", f"""while [ ! -e {go} ]; do sleep 0.05; done; echo '{{"n": 42}}' > "$SLOTH_RESULT" """)
    second = add(h, "--after", str(first), "-s", f'cat "$SLOTH_AFTER_RESULTS" > {seen}')
    h.wait_state(first, "running")
    h.kill9()  # the daemon only: the keeper keeps the run, reads its result and journals it
    go.touch()
    time.sleep(1.0)  # the first job ends while no daemon runs
    h.start()
    assert h.wait_state(second, "done", "failed", "cancelled", timeout_s=30)["state"] == "done"
    assert json.loads(seen.read_text())[0]["result"] == {"n": 42}
    assert json.loads(h.cli("result", str(first), check=True).stdout) == {"n": 42}
    h.kill9_all()  # and the queue file (or database) keeps it: read with no daemon
    assert json.loads(h.cli("result", str(first), check=True).stdout) == {"n": 42}
