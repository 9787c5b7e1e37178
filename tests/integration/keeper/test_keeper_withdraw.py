"""The keeper's half of withdrawing a held run (withdrawal.py), over its real
socket with real jobs: an unspawn that races the end of the run it waits
behind. The daemon records a cancel or a stop from the answer alone, so the
answer must say what the keeper did, and what it did must come first on
the wire: dropped means it never started (and never will); not dropped
means its start was told before (a started event, or the spawn's own
answer if it started at once)."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import time
from typing import Any

from sloth_daemon.keeper import procident
from sloth_daemon.daemon.worker.spawner import SpawnRequest
from sloth_daemon.daemon.supervision import KeeperSpawner
from tests.support.keeper_rig import KeeperRig, Wire, wait_for


def frame(rid: int, op: str, **args: Any) -> bytes:
    return json.dumps({"v": 1, "id": rid, "op": op, "args": args}).encode() + b"\n"


def until_answer(w: Wire, rid: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Every message up to the answer to ``rid``, in the order they came."""
    seen = []
    while True:
        msg = w.read_msg()
        seen.append(msg)
        if msg.get("id") == rid:
            return msg, seen


def test_an_unspawn_racing_the_end_it_waits_for_is_answered_after_what_the_keeper_did(rig: KeeperRig):
    rig.start()
    w = rig.wire()
    rnd = random.Random(20)
    dropped = kept = 0
    for n in range(40):
        a, b = f"a{n}", f"b{n}"
        mark = rig.root / f"{b}.ran"
        w.send(frame(1, "spawn", **rig.job(a, "true"))
               + frame(2, "spawn", after=a, **rig.job(b, "sh", "-c", f": > {mark}")))
        time.sleep(rnd.uniform(0, 0.004))  # a ends before the question comes, or after
        w.send(frame(3, "unspawn", key=b))
        answer, seen = until_answer(w, 3)
        told_started = any(m.get("event", {}).get("kind") == "started" and m["event"]["key"] == b for m in seen)
        started_at_once = any(m.get("id") == 2 and m.get("ok") and "pid" in m["result"] for m in seen)
        if answer["result"]["dropped"]:
            dropped += 1
            assert not told_started and not started_at_once
            wait_for(lambda: all(r["state"] == "exited" for r in w.hello()["runs"]), what=f"{a} ended")
            assert b not in {r["key"] for r in w.hello()["runs"]} and not mark.exists()  # never, a ended
        else:
            kept += 1
            assert told_started or started_at_once, (answer, seen)
            wait_for(mark.exists, what=f"{b} ran")
        wait_for(lambda: all(r["state"] == "exited" for r in w.hello()["runs"]), what="both ended")
        w.call("ack", keys=[a, b])
        w.events.clear()
    assert dropped + kept == 40
    print(f"dropped {dropped}, started before the question {kept}")


class Heard:
    """A KeptRunListener that notes what it is told."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def started(self, pid: int, identity: dict[str, Any]) -> None:
        self.calls.append("started")

    def spawn_failed(self, message: str, retry: bool, resource: bool = False) -> None:
        self.calls.append("spawn_failed")

    def exited(self, outcome: Any) -> None:
        self.calls.append("exited")

    def frozen(self, why: str) -> None:
        self.calls.append("frozen")

    def taken_back(self) -> None:
        self.calls.append("taken_back")

    def noted(self, what: str, message: str) -> None:
        self.calls.append("noted")

    def progressed(self, progress: Any) -> None:
        self.calls.append("progressed")


def test_a_spawn_waiting_for_an_earlier_process_to_end_is_withdrawn_before_it_is_sent(rig: KeeperRig):
    """The lease of the job's last attempt lapsed with its process alive: its
    next spawn waits in the daemon until that process is ended. Withdrawn
    meanwhile, it never goes to the keeper (which would hold or start it
    after an answer that it knows no such run)."""
    old = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 30"], env=rig.env, start_new_session=True)
    rig.extra_pids.append(old.pid)

    async def go() -> list[str]:
        sp = KeeperSpawner(rig.paths, name="test", check_s=0.2)  # no keeper connection: none is needed
        sink = Heard()
        req = SpawnRequest(key="k", job_id=1, attempt=2, argv=["true"], cwd=None, env={}, log_path=rig.root / "k.log",
                           log_cap=1 << 20, timeout_s=None, kill_grace_s=0.3, previous=procident.identity(old.pid))
        sp.spawn(req, sink)
        await asyncio.sleep(0.05)  # the old process ignores SIGTERM: ending it takes the grace
        sp.unspawn("k")
        await asyncio.sleep(0.6)  # past the grace: the old one is gone now
        assert old.poll() is not None
        return sink.calls

    assert asyncio.run(go()) == ["taken_back"]  # and nothing after: never sent, never failed
