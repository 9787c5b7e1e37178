"""`sloth doctor` on a PostgreSQL queue (issue 20 item 15): it checks the
shared queue, not a SQLite file that was never meant to be there, so a
healthy shared queue warns of nothing lost."""

from __future__ import annotations

import json

from tests.support.harness import TEST_CONFIG


def doctor(h) -> dict[str, dict[str, str]]:
    p = h.cli("doctor", "--json")
    return {c["name"]: c for c in json.loads(p.stdout)["checks"]}


def test_doctor_on_a_healthy_shared_queue_warns_of_no_lost_sqlite_queue(make_harness, pg_url):
    h = make_harness(TEST_CONFIG + f'queue_url = "{pg_url}"\n')
    h.start()
    jid = h.add("true")
    h.wait_state(jid, "done")
    qid = h.call("status")["queue"]["id"]
    for running in (True, False):
        checks = doctor(h)
        assert checks["queue"]["status"] == "ok", checks["queue"]
        assert f"shared queue {qid} at " in checks["queue"]["detail"], checks["queue"]
        assert checks["database"]["status"] == "ok" and "PostgreSQL" in checks["database"]["detail"]
        said = json.dumps(checks)
        assert "queue.db" not in said and "lost" not in said.lower() and "earlier queues" not in said, said
        if running:
            h.stop()


def test_doctor_says_when_the_shared_queue_is_no_queue_of_this_sloth(make_harness, pg_fresh):
    url = pg_fresh(migrated=False)
    h = make_harness(TEST_CONFIG + f'queue_url = "{url}"\n')
    checks = doctor(h)
    assert checks["queue"]["status"] == "fail", checks["queue"]
    assert checks["queue"]["detail"].startswith("the shared queue at "), checks["queue"]
