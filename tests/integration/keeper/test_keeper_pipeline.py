"""Runs held behind another in a real keeper (spawn ``after``, unspawn):
the keeper side of pipelining (keeper/pending.py), over its real socket, with
real jobs. Waits are bounded polls, never timed assertions; the ``rig``
fixture reaps the keeper and every job, also on failure."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any


from sloth_daemon.daemon.keeper_client import KeeperClient, boot_now, read_journal
from sloth_daemon.daemon.worker.spawner import SpawnRequest
from sloth_daemon.daemon.supervision import KeeperSpawner
from tests.integration.keeper.test_keeper import Sink, until
from tests.support.keeper_rig import KeeperRig, Wire


def held_until(rig: KeeperRig, key: str, gate: Path, code: int = 0) -> dict[str, Any]:
    """A job that runs until ``gate`` exists, noting in a file that it ended."""
    end = rig.root / f"{key}.end"
    return rig.job(key, "sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.01; done; : > {end}; exit {code}")


def noting_start(rig: KeeperRig, key: str) -> dict[str, Any]:
    """A job that first notes whether its predecessor had ended (its .end file)."""
    return rig.job(key, "sh", "-c", f'ls {rig.root} > {rig.root}/{key}.saw; echo ran')


def runs_of(w: Wire) -> dict[str, dict[str, Any]]:
    return {r["key"]: r for r in w.hello()["runs"]}


def test_a_held_run_starts_when_its_predecessor_ends_never_before(rig):
    rig.start()
    go = rig.root / "go"
    w = rig.wire()
    assert "after" in w.hello()["features"]
    a = w.call("spawn", **held_until(rig, "a", go))
    assert w.call("spawn", after="a", **noting_start(rig, "b")) == {"pending": True}
    assert w.call("spawn", after="b", **noting_start(rig, "c")) == {"pending": True}  # a chain
    held = runs_of(w)
    assert (held["b"]["state"], held["b"]["after"], held["b"]["pid"]) == ("pending", "a", None)
    assert (held["c"]["state"], held["c"]["after"]) == ("pending", "b")
    assert not (rig.root / "b.saw").exists() and rig.log_of("b") == b""  # no process, no log yet
    go.touch()
    started = w.event("started", "b")
    assert started["pid"] > 0 and started["identity"]["pid"] == started["pid"]
    w.event("exited", "b")
    w.event("started", "c")
    w.event("exited", "c")
    assert "a.end" in (rig.root / "b.saw").read_text().split()  # b began after a had ended
    assert "b.saw" in (rig.root / "c.saw").read_text().split()
    assert rig.log_of("b") == b"ran\n" and a["pid"] > 0


def test_exited_of_the_predecessor_comes_before_the_started_of_its_successor(rig):
    rig.start()
    go = rig.root / "go"
    w = rig.wire()
    w.call("spawn", **held_until(rig, "a", go))
    w.call("spawn", after="a", **rig.job("b", "true"))
    go.touch()
    w.event("exited", "b")
    assert [(e["kind"], e["key"]) for e in w.events][:2] == [("exited", "a"), ("started", "b")]


def test_unspawn_drops_a_held_run_but_never_one_that_started(rig):
    rig.start()
    go, go2 = rig.root / "go", rig.root / "go2"
    w = rig.wire()
    w.call("spawn", **held_until(rig, "a", go))
    w.call("spawn", after="a", **noting_start(rig, "b"))
    w.call("spawn", after="b", **noting_start(rig, "c"))
    assert w.call("unspawn", key="b") == {"dropped": True}  # c now waits for a
    assert runs_of(w)["c"]["after"] == "a" and "b" not in runs_of(w)
    assert w.call("unspawn", key="nope") == {"dropped": False, "state": "unknown"}
    go.touch()
    w.event("started", "c")
    w.event("exited", "c")
    assert not (rig.root / "b.saw").exists()
    assert w.call("spawn", after="a", **rig.job("d", "true"))["pid"] > 0  # a has ended: at once
    w.call("spawn", **held_until(rig, "e", go2))
    w.call("spawn", after="e", **held_until(rig, "f", rig.root / "go3"))  # go exists: f would end at once
    go2.touch()
    w.event("started", "f")
    assert w.call("unspawn", key="f") == {"dropped": False, "state": "running"}


def test_a_killed_held_run_ends_unstarted_and_is_kept_until_acknowledged(rig):
    rig.start()
    go = rig.root / "go"
    w = rig.wire()
    w.call("spawn", **held_until(rig, "a", go))
    w.call("spawn", after="a", **noting_start(rig, "b"))
    w.call("spawn", after="b", **noting_start(rig, "c"))
    assert w.call("kill", key="b", reason="cancelled") == {}
    out = w.event("exited", "b")["outcome"]
    assert (out["started"], out["returncode"], out["killed_by"], out["reason"]) == (False, None, "request", "cancelled")
    held = runs_of(w)
    assert held["b"]["state"] == "exited" and held["c"]["after"] == "a"
    assert [r["key"] for r in read_journal(rig.paths.keeper_journal)] == ["b"]
    go.touch()
    w.event("started", "c")
    w.event("exited", "c")
    assert not (rig.root / "b.saw").exists() and rig.log_of("b") == b""
    w.call("ack", keys=["a", "b", "c"])
    assert w.hello()["runs"] == []


def test_a_held_run_whose_trust_lapses_is_dropped_and_never_starts(rig):
    rig.start(check_s=0.1)
    go = rig.root / "go"
    w = rig.wire()
    w.call("spawn", **held_until(rig, "a", go))
    w.call("spawn", after="a", trust_until=boot_now() + 0.6, term_lead_s=0.1, **noting_start(rig, "b"))
    out = w.event("exited", "b")["outcome"]
    assert out["started"] is False and out["killed_by"] == "fence"
    assert out["reason"].startswith("fenced before it started")
    assert runs_of(w)["a"]["state"] == "running"
    go.touch()
    w.event("exited", "a")
    assert not (rig.root / "b.saw").exists()


def test_a_held_run_that_cannot_start_says_why_and_the_next_starts_in_its_place(rig):
    rig.start()
    go = rig.root / "go"
    w = rig.wire()
    w.call("spawn", **held_until(rig, "a", go))
    w.call("spawn", after="a", **rig.job("b", "no-such-program-xyz"))
    w.call("spawn", after="b", **noting_start(rig, "c"))
    go.touch()
    out = w.event("exited", "b")["outcome"]
    assert out["started"] is False and out["spawn_error"] == {"retry": False, "resource": False}
    assert out["reason"] == "command not found: no-such-program-xyz"
    w.event("started", "c")
    w.event("exited", "c")


def test_one_run_waits_behind_each_and_a_bad_after_is_refused(rig):
    rig.start()
    go = rig.root / "go"
    w = rig.wire()
    w.call("spawn", **held_until(rig, "a", go))
    w.call("spawn", after="a", **rig.job("b", "true"))
    second = w.request("spawn", after="a", **rig.job("c", "true"))
    assert second["error"]["code"] == "exists" and "c" not in runs_of(w)
    assert w.request("spawn", after=7, **rig.job("d", "true"))["error"]["code"] == "bad_request"
    assert w.call("spawn", after="never-was", **rig.job("e", "true"))["pid"] > 0
    go.touch()
    w.event("exited", "b")


def test_sigterm_drops_held_runs_unstarted(rig):
    keeper = rig.start()
    go = rig.root / "go"
    w = rig.wire()
    w.call("spawn", **held_until(rig, "a", go))
    w.call("spawn", after="a", **noting_start(rig, "b"))
    keeper.terminate()
    assert keeper.wait(30) == 0
    by_key = {r["key"]: r["outcome"] for r in read_journal(rig.paths.keeper_journal)}
    assert by_key["b"]["started"] is False and by_key["b"]["killed_by"] == "keeper"
    assert by_key["a"]["killed_by"] == "keeper" and not (rig.root / "b.saw").exists()


# ------------------------------------------------------- the daemon's side
class PipeSink(Sink):
    def __init__(self) -> None:
        super().__init__()
        self.back = asyncio.Event()

    def taken_back(self) -> None:
        self.calls.append(("taken_back",))
        self.back.set()

    def noted(self, what: str, message: str) -> None:
        self.calls.append(("noted", what, message))


def test_the_client_hears_a_held_runs_start_and_its_take_back(rig):
    async def main() -> None:
        c = await KeeperClient.connect(rig.paths, name="test", check_s=0.2)
        go = rig.root / "go"
        a, b, d = PipeSink(), PipeSink(), PipeSink()
        c.spawn(held_until(rig, "a", go), a)
        c.spawn(rig.job("b", "true") | {"after": "a"}, b)
        c.spawn(rig.job("d", "true") | {"after": "b"}, d)
        c.unspawn("d")
        await until(d.back)
        assert d.calls == [("taken_back",)]
        go.touch()
        await until(b.ended)
        assert [x[0] for x in b.calls] == ["started", "exited"] and b.calls[0][1] > 0
        c.ack(["a", "b"])
        await c.bye()
        await c.close()
    asyncio.run(main())


OLD_KEEPER = """
import sys
import sloth_daemon.keeper.wire as w
w.FEATURES = ("env_ref",)  # as a keeper from before pipelining: no `after`, no unspawn
w.OPS["spawn"] = (w.OPS["spawn"][0], w.OPS["spawn"][1] - {"after"})
del w.OPS["unspawn"]
from sloth_daemon.keeper.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_daemon_never_sends_after_to_an_older_keeper(rig):
    argv = rig.argv()
    rig.argv = lambda **kw: [sys.executable, "-c", OLD_KEEPER, *argv[3:]]  # type: ignore[method-assign]
    rig.start()
    w = rig.wire()
    assert "after" not in w.hello()["features"]
    w.send(json.dumps({"v": 1, "id": 9, "op": "spawn", "args": {"after": "x", **rig.job("x", "true")}}).encode() + b"\n")
    refused = w.read_msg()  # (an older keeper answers a refused request under id null)
    assert refused["error"]["code"] == "bad_request"  # why the daemon must never send it there
    w.close()

    async def main() -> None:
        ks = KeeperSpawner(rig.paths, name="test", check_s=0.2)
        await ks.connect()
        assert ks.pipelines is False
        first, held = PipeSink(), PipeSink()
        ks.spawn(request(rig, "p"), first)
        ks.spawn(request(rig, "q", after="p"), held)  # a worker would not; if one raced, it is given back
        await until(first.ended)
        assert held.calls == [("taken_back",)] and "q" not in {r["key"] for r in ks.client.held}  # type: ignore[union-attr]
        await ks.close(bye=True)
    asyncio.run(main())
    assert rig.log_of("q") == b""


def request(rig: KeeperRig, key: str, after: str | None = None) -> SpawnRequest:
    j = rig.job(key, "true")
    return SpawnRequest(key=key, job_id=1, attempt=1, argv=j["argv"], cwd=j["cwd"], env=j["env"],
                        log_path=Path(j["log_path"]), log_cap=j["log_cap"], timeout_s=None, kill_grace_s=1.0,
                        after=after)



def test_a_spawn_after_a_refused_run_waits_for_what_that_one_waited_for(rig):
    """The daemon sends b and c behind a at once; b is refused (here: a bad
    argv). c must not start beside a, as a spawn after a key the keeper does
    not know would: it waits for a."""
    rig.start()
    go = rig.root / "go"
    w = rig.wire()
    w.call("spawn", **held_until(rig, "a", go))
    bad = {**rig.job("b", "true"), "argv": []}
    assert w.request("spawn", after="a", **bad)["error"]["code"] == "bad_request"
    assert w.call("spawn", after="b", **noting_start(rig, "c")) == {"pending": True}
    assert runs_of(w)["c"]["after"] == "a"
    go.touch()
    w.event("started", "c")
    w.event("exited", "c")
    assert "a.end" in (rig.root / "c.saw").read_text().split()


def test_a_held_run_starts_only_once_a_failed_runs_leftovers_are_ended(rig):
    """a fails and leaves a setsid grandchild at work: the keeper ends it
    before a counts as exited, and b, held behind a, starts only then."""
    rig.start()
    g, saw = rig.root / "g.pid", rig.root / "b.saw"
    w = rig.wire()
    w.call("spawn", **rig.job("a", "sh", "-c", f"(setsid sleep 60 & echo $! > {g}); sleep 0.2; exit 1"))
    w.call("spawn", after="a", **rig.job("b", "sh", "-c", f'cat /proc/$(cat {g})/stat > {saw} 2>&1 || echo gone > {saw}'))
    w.event("exited", "a")
    w.event("started", "b")
    w.event("exited", "b")
    text = saw.read_text()
    assert text.startswith("gone") or text.split(")")[-1].split()[0] == "Z", text  # dead before b began
