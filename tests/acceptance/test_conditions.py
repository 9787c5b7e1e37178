"""Issue 24, items 1 and 5: run conditions, named resources and weighted
slots, through the real daemon, its keeper and the CLI.

Power: the daemon runs in a private mount namespace over a fake
/sys/class/power_supply (``unshare --mount --propagation private``, then
``mount --bind``), so a test plugs the charger in by writing ``online``.
No system bus runs here: logind and NetworkManager are fakes of busctl on
PATH where a test needs them, and their absence is what `sloth add` must
refuse.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.harness import TEST_CONFIG, Harness, on_one_queue
from tests.support.power import can_unshare, fake_power, over_power

pytestmark = pytest.mark.acceptance

FAST_LOOK = TEST_CONFIG + 'conditions_check_s = "1s"\n'


def start_over_power(h: Harness, tree: Path, env: dict[str, str] | None = None) -> None:
    """The daemon (and so its keeper and jobs) in a namespace where
    /sys/class/power_supply is ``tree``."""
    why = can_unshare()
    if why:
        pytest.skip(why)
    h.start(wait=False, env=env, wrap=over_power(tree))
    h.wait_ready(h.daemon)


def fake_bin(root: Path, scripts: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in scripts.items():
        (root / name).write_text("#!/bin/sh\n" + text)
        (root / name).chmod(0o755)
    return root


def ls_line(h: Harness, job_id: int) -> str:
    out = h.cli("ls", "-a", check=True).stdout
    return next((ln for ln in out.splitlines() if ln.split()[:1] == [str(job_id)]), "")


# ------------------------------------------------------------------ power
def test_an_ac_job_waits_on_battery_says_why_and_starts_soon_after_plugging_in(make_harness, home):
    h = make_harness(FAST_LOOK)
    tree = fake_power(home / "power", online=False)
    start_over_power(h, tree)
    marker = h.home / "ran"
    out = h.cli("add", "--when", "ac", "--", "sh", "-c", f"touch {marker}", check=True)
    jid = int(out.stdout.strip())
    h.wait_for(lambda: "waiting for mains power" in ls_line(h, jid), 15, "ls to say why it waits")
    assert h.job(jid)["state"] == "queued"
    assert "waiting   waiting for mains power" in h.cli("show", str(jid), check=True).stdout
    assert f"waiting  job {jid} for mains power" in h.cli("status", check=True).stdout
    assert list(h.call("status")["conditions"]["waiting"].values()) == ["waiting for mains power"]
    time.sleep(2.5)  # two looks at the charger: still on battery, still queued
    assert not marker.exists() and h.job(jid)["state"] == "queued"
    (tree / "ACAD" / "online").write_text("1\n")
    plugged = time.monotonic()
    h.wait_state(jid, "done", timeout_s=15)
    assert time.monotonic() - plugged < 5, "started within seconds of mains power"
    assert marker.exists()
    assert h.job(jid)["wait_reason"] is None


def test_battery_threshold_is_met_on_mains_and_by_charge(make_harness, home):
    h = make_harness(FAST_LOOK)
    tree = fake_power(home / "power", online=False, percent=30)
    start_over_power(h, tree)
    jid = h.add("true", when=["battery>=40"])
    h.wait_for(lambda: "battery >= 40% (at 30%)" in (h.job(jid)["wait_reason"] or ""), 15, "the reason")
    (tree / "BAT0" / "capacity").write_text("45\n")
    h.wait_state(jid, "done", timeout_s=15)


def test_on_lost_stop_ends_the_run_and_requeues_it_without_spending_a_try(make_harness, home):
    h = make_harness(FAST_LOOK)
    tree = fake_power(home / "power", online=True)
    start_over_power(h, tree)
    marker = h.home / "runs"
    jid = h.add("sh", "-c", f"echo x >> {marker}; sleep 60", when=["ac"], on_lost="stop", max_attempts=1)
    h.wait_for(lambda: marker.exists(), 15, "the job to start")
    (tree / "ACAD" / "online").write_text("0\n")
    h.wait_for(lambda: h.job(jid)["state"] == "queued", 15, "the job requeued")
    job = h.job(jid)
    assert job["tries"] == 0 and job["attempts"] == 1, job  # max_attempts 1: a spent try would have failed it
    kinds = [e["kind"] for e in h.events(jid)]
    assert "condition_lost" in kinds, kinds
    (tree / "ACAD" / "online").write_text("1\n")
    h.wait_for(lambda: marker.read_text().count("x") == 2, 15, "it runs again on mains power")


def test_no_idle_wakeups_while_nothing_waits_on_a_condition(make_harness, home):
    """Conditions are looked at only while a job waits on one: with none
    the count of looks stays put however long the daemon idles."""
    h = make_harness(FAST_LOOK)
    start_over_power(h, fake_power(home / "power", online=True))
    h.wait_state(h.add("true"), "done")
    looks = h.call("status")["conditions"]["looks"]
    time.sleep(3)  # three conditions_check_s
    assert h.call("status")["conditions"]["looks"] == looks
    assert h.call("status")["conditions"]["watching"] is False


# -------------------------------------------------------- not observable
def test_conditions_this_machine_cannot_observe_are_refused_at_add(harness):
    harness.start(env={"PATH": "/usr/bin:/bin"})
    for cond, words in (("idle=10m", "logind"), ("online", "NetworkManager"), ("unmetered", "NetworkManager")):
        p = harness.cli("add", "--when", cond, "--", "true")
        assert p.returncode != 0, p.stdout
        assert words in p.stdout + p.stderr, (cond, p.stderr)
    assert harness.call("list")["total"] == 0  # nothing was queued
    p = harness.cli("add", "--when", "sunny", "--", "true")
    assert p.returncode != 0 and "not a condition" in p.stderr
    p = harness.cli("add", "--on-lost", "stop", "--", "true")
    assert p.returncode != 0 and "--when" in p.stderr
    p = harness.cli("add", "--when", "ac", "--on-lost", "sleep", "--", "true")
    assert p.returncode != 0 and "one of continue, pause, stop" in p.stderr
    from sloth_daemon.errors import SlothError  # the socket: garbage refused, nothing queued, still serving
    for bad in ({"when": [1]}, {"when": "ac"}, {"needs": {"gpu": 10**30}}, {"slots": "2"}, {"needs": {"": 1}},
                {"when": ["x" * 100_000]}, {"on_lost": ["stop"], "when": ["ac"]}):
        with pytest.raises(SlothError):
            harness.add("true", **bad)
    assert harness.call("list")["total"] == 0 and harness.call("ping")


def test_idle_and_network_from_fake_logind_and_networkmanager(make_harness, home):
    """busctl answering as logind and NetworkManager would: idle for an
    hour, online and unmetered; the jobs run."""
    bindir = fake_bin(home / "bin", {"busctl": """
case "$*" in
  *IdleHint*) echo "b true" ;;
  *IdleSinceHintMonotonic*) echo "t 1" ;;
  *NetworkManager*State*) echo "u 70" ;;
  *Connectivity*) echo "u 4" ;;
  *Metered*) echo "u 4" ;;
  *) exit 1 ;;
esac
"""})
    h = make_harness(FAST_LOOK)
    h.start(env={"PATH": f"{bindir}:/usr/bin:/bin"})
    ids = [h.add("true", when=["idle=1m"]), h.add("true", when=["online", "unmetered"])]
    for jid in ids:
        h.wait_state(jid, "done", timeout_s=15)


# -------------------------------------------------------------- resources
def test_three_gpu_jobs_on_two_gpus_never_more_than_two_at_once(make_harness, home):
    h = make_harness(TEST_CONFIG + 'default_concurrency = 3\n[resources]\ngpu = ["0", "1"]\n')
    h.start()
    out = home / "gpu"
    out.mkdir()
    script = (f'echo "$SLOTH_GPU $CUDA_VISIBLE_DEVICES $(date +%s.%N)" > {out}/$SLOTH_JOB_ID.start; sleep 1.5;'
              f' date +%s.%N > {out}/$SLOTH_JOB_ID.end')
    ids = [int(h.cli("add", "--needs", "gpu=1", "--", "sh", "-c", script, check=True).stdout) for _ in range(3)]
    for jid in ids:
        h.wait_state(jid, "done", timeout_s=30)
    spans = []
    for jid in ids:
        gpu, cuda, start = (out / f"{jid}.start").read_text().split()
        assert gpu == cuda and gpu in ("0", "1"), (gpu, cuda)
        spans.append((float(start), float((out / f"{jid}.end").read_text()), gpu))
    for t, _, _ in spans:  # at each start, who runs
        running = [s for s in spans if s[0] <= t < s[1]]
        assert len(running) <= 2, spans
        assert len({s[2] for s in running}) == len(running), f"two jobs on one gpu: {spans}"
    p = h.cli("add", "--needs", "gpu=3", "--", "true")
    assert p.returncode != 0 and "has 2 gpu" in p.stderr
    p = h.cli("add", "--needs", "tpu=1", "--", "true")
    assert p.returncode != 0 and "no resource 'tpu'" in p.stderr


def test_held_tokens_stay_held_by_adopted_runs_across_a_daemon_restart(make_harness, home):
    h = make_harness(TEST_CONFIG + 'default_concurrency = 2\n[resources]\nlicence = 1\n')
    h.start()
    first = h.add("sleep", "4", needs={"licence": 1})
    h.wait_state(first, "running")
    h.kill9()  # the keeper keeps the run
    h.start()
    second = h.add("true", needs={"licence": 1})
    time.sleep(1.5)
    assert h.job(second)["state"] == "queued", "the adopted run still holds the only licence"
    assert "licence: 1 wanted, 0 of 1 free" in (h.job(second)["wait_reason"] or "")
    h.wait_state(first, "done", timeout_s=20)
    h.wait_state(second, "done", timeout_s=20)


def test_slots_count_against_the_lane_and_a_big_job_is_not_starved(make_harness, home):
    h = make_harness(TEST_CONFIG + "[lanes]\nw = 3\n")
    h.start()
    out = home / "slots"
    out.mkdir()

    def job(name: str, secs: float, **spec: object) -> int:
        return h.add("sh", "-c", f"date +%s.%N > {out}/{name}.start; sleep {secs}; date +%s.%N > {out}/{name}.end",
                     lane="w", **spec)
    job("a", 2)
    h.wait_for(lambda: (out / "a.start").exists(), 10, "a to start")
    job("big", 0.5, slots=3)  # waits for all three slots; reserves the lane
    job("b", 0.5)  # would fit beside a, but big came first
    # the file is made by the shell's redirection before date writes into it: wait for what it says
    h.wait_for(lambda: (out / "b.end").exists() and (out / "b.end").read_text().strip(), 30, "b to end")
    t = {n: (float((out / f"{n}.start").read_text()), float((out / f"{n}.end").read_text()))
         for n in ("a", "big", "b")}
    assert t["big"][0] >= t["a"][1] - 0.05, t  # big ran alone: three slots
    assert t["b"][0] >= t["big"][1] - 0.05, t  # b did not jump ahead of big
    p = h.cli("add", "--lane", "w", "--slots", "4", "--", "true")
    assert p.returncode != 0 and "runs 3 job(s) at once" in p.stderr


def test_a_power_event_starts_the_job_at_once_without_waiting_for_the_next_look(make_harness, home):
    """udev's word (``udevadm monitor``, a fake printing what udev prints
    when the charger's ``online`` changes) is heard at once: the default
    look every 30 s would start the job half a minute late."""
    tree = fake_power(home / "power", online=False)
    bindir = fake_bin(home / "bin", {"udevadm": f"""
[ "$1" = monitor ] || exit 2
echo "monitor will print the received events for:"
echo "UDEV - the event which udev sends out after rule processing"
last=$(cat {tree}/ACAD/online)
touch {home}/udev-listening
while sleep 0.1; do
  now=$(cat {tree}/ACAD/online)
  if [ "$now" != "$last" ]; then
    echo "UDEV  [12345.678901] change   /devices/LNXSYSTM:00/ACPI0003:00/power_supply/ACAD (power_supply)"
    last=$now
  fi
done
"""})
    h = make_harness(TEST_CONFIG)  # conditions_check_s: the default 30 s
    start_over_power(h, tree, env={"PATH": f"{bindir}:/usr/bin:/bin"})
    jid = h.add("true", when=["ac"])
    h.wait_for(lambda: h.job(jid)["wait_reason"] == "waiting for mains power", 15, "the reason")
    # the watcher has read the charger's state: a change made before that
    # would be its starting state, never an event (under load that took > 1 s)
    h.wait_for(lambda: (home / "udev-listening").exists(), 15, "udevadm monitor started")
    (tree / "ACAD" / "online").write_text("1\n")
    plugged = time.monotonic()
    h.wait_state(jid, "done", timeout_s=20)
    assert time.monotonic() - plugged < 5, "started on the event, not at the next 30 s look"


def test_the_power_watcher_dies_with_a_daemon_killed_9(make_harness, home):
    """``udevadm monitor`` is the daemon's child, and prints only when power
    changes: a daemon killed -9 must not leave it running for ever (the
    chaos soak found one after every job had finished)."""
    import os
    import signal

    import psutil

    from sloth_daemon.keeper.procident import wait_gone

    tree = fake_power(home / "power", online=False)
    bindir = fake_bin(home / "bin", {"udevadm": f"""
[ "$1" = monitor ] || exit 2
echo $$ > {home}/udev-pid
while sleep 0.1; do :; done
"""})
    h = make_harness(TEST_CONFIG)
    start_over_power(h, tree, env={"PATH": f"{bindir}:/usr/bin:/bin"})
    h.add("true", when=["ac"])
    h.wait_for(lambda: (home / "udev-pid").exists() and (home / "udev-pid").read_text().strip(), 15,
               "udevadm monitor started")
    watcher = psutil.Process(int((home / "udev-pid").read_text()))
    assert h.daemon is not None
    os.kill(h.daemon.pid, signal.SIGKILL)
    h.daemon.wait()
    left = wait_gone([watcher], 5)
    for p in left:  # reaped here, whatever the verdict
        p.kill()
    assert not left, "udevadm monitor outlived the daemon"


def test_a_lanes_conditions_hold_back_every_job_of_the_lane_and_no_other(make_harness, home):
    h = make_harness(FAST_LOOK + '[lanes.render]\nconcurrency = 2\nwhen = ["ac"]\n')
    tree = fake_power(home / "power", online=False)
    start_over_power(h, tree)
    held, free = h.add("true", lane="render"), h.add("true")
    h.wait_state(free, "done")
    time.sleep(1.5)
    assert h.job(held)["state"] == "queued"
    assert "waiting  lane render for mains power" in h.cli("status", check=True).stdout
    (tree / "ACAD" / "online").write_text("1\n")
    h.wait_state(held, "done", timeout_s=15)


def test_a_killed_run_frees_its_tokens_for_the_next(make_harness):
    h = make_harness(TEST_CONFIG + 'default_concurrency = 2\n[resources]\nlicence = 1\n')
    h.start()
    first = h.add("sleep", "60", needs={"licence": 1})
    h.wait_state(first, "running")
    second = h.add("sh", "-c", 'echo "$SLOTH_LICENCE"', needs={"licence": 1})
    h.wait_for(lambda: h.job(second)["wait_reason"], 10, "the second to wait for the licence")
    h.cli("kill", str(first), check=True)
    h.wait_state(second, "done", timeout_s=20)
    assert h.job(first)["state"] in ("failed", "cancelled", "queued")


@pytest.mark.postgres
def test_on_a_shared_queue_each_machine_gives_out_its_own_tokens(make_harness, pg_fresh, home):
    """Two daemons on one PostgreSQL queue, each with one licence of its own:
    four jobs that need one run two at a time, one per machine, and each
    run's token is recorded with it (its machine's)."""
    url = pg_fresh()
    config = TEST_CONFIG + 'poll_s = "1s"\ndefault_concurrency = 4\n[resources]\nlicence = 1\n'
    ms = on_one_queue(make_harness, url, {"m1": config, "m2": config})
    out = home / "shared"
    out.mkdir()
    script = f"date +%s.%N > {out}/$SLOTH_JOB_ID.start; sleep 1.5; date +%s.%N > {out}/$SLOTH_JOB_ID.end"
    ids = [int(ms[0].cli("add", "--anywhere", "--needs", "licence=1", "--", "sh", "-c", script, check=True).stdout)
           for _ in range(4)]
    for jid in ids:
        ms[0].wait_state(jid, "done", timeout_s=60)
    spans = [(float((out / f"{j}.start").read_text()), float((out / f"{j}.end").read_text()),
              ms[0].job(j)["worker"].split(":")[1]) for j in ids]
    for t, _, _ in spans:
        here = [s for s in spans if s[0] <= t < s[1]]
        assert len(here) <= 2 and len({s[2] for s in here}) == len(here), spans  # one licence per machine
    assert {s[2] for s in spans} == {"m1", "m2"}, spans


def tree_states(pid: int) -> list[str]:
    """The /proc state letter of a process and each of its descendants."""
    import psutil

    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    return [Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] for p in procs]


def test_on_lost_pause_freezes_the_tree_and_continues_it_when_the_condition_holds_again(make_harness, home):
    h = make_harness(FAST_LOOK)
    tree = fake_power(home / "power", online=True)
    start_over_power(h, tree)
    ticks = h.home / "ticks"
    jid = h.add("sh", "-c", f"sh -c 'while :; do echo x >> {ticks}; sleep 0.1; done' & wait", when=["ac"],
                on_lost="pause")
    job = h.wait_for(lambda: (j := h.job(jid))["runner"] and ticks.exists() and j, 15, "the job to run")
    pid = job["runner"]["pid"]
    (tree / "ACAD" / "online").write_text("0\n")
    h.wait_for(lambda: set(tree_states(pid)) == {"T"}, 15, "the whole tree stopped (state T)")
    # the keeper stops the tree, then the daemon hears it and records the pause
    assert h.wait_for(lambda: (j := h.job(jid))["paused"] and j, 15, "the pause recorded")["state"] == "running"
    size = ticks.stat().st_size
    time.sleep(1)
    assert ticks.stat().st_size == size, "a paused tree writes nothing"
    assert any("condition lost: mains power" in e["message"] for e in h.events(jid) if e["kind"] == "paused")
    h.kill9()  # the keeper holds the pause; the next daemon continues it when the charger is back
    h.daemon = None
    start_over_power(h, tree)
    time.sleep(1.5)
    assert set(tree_states(pid)) == {"T"}, "still paused after the restart: the charger is still out"
    (tree / "ACAD" / "online").write_text("1\n")
    h.wait_for(lambda: "T" not in tree_states(pid), 15, "the tree continued")
    h.wait_for(lambda: ticks.stat().st_size > size, 10, "it runs again")
    # as with the pause: the keeper continues the tree, then the daemon hears it and records it
    assert h.wait_for(lambda: (j := h.job(jid)) and not j["paused"] and j, 10, "the continue recorded")["tries"] == 1


def test_a_pause_the_user_asked_for_is_not_undone_by_conditions(make_harness, home):
    h = make_harness(FAST_LOOK)
    tree = fake_power(home / "power", online=True)
    start_over_power(h, tree)
    jid = h.add("sleep", "60", when=["ac"], on_lost="pause")
    pid = h.wait_for(lambda: (h.job(jid)["runner"] or {}).get("pid"), 15, "the job to run")
    h.cli("pause", "--job", str(jid), check=True)
    h.wait_for(lambda: set(tree_states(pid)) == {"T"}, 10, "paused by hand")
    (tree / "ACAD" / "online").write_text("0\n")
    time.sleep(1.5)
    (tree / "ACAD" / "online").write_text("1\n")
    time.sleep(2.5)  # two looks with the condition holding
    assert set(tree_states(pid)) == {"T"} and h.job(jid)["paused"]


def test_a_hand_pause_after_a_condition_pause_is_not_undone_by_conditions(make_harness, home):
    """A lost condition pauses the run; the user continues it (`resume
    --job`), then pauses it by hand; or pauses a run the condition paused
    already. Either way the pause is the user's now: the charger coming
    back must not continue it."""
    h = make_harness(FAST_LOOK)
    tree = fake_power(home / "power", online=True)
    start_over_power(h, tree)
    first = h.add("sleep", "60", when=["ac"], on_lost="pause")
    second = h.add("sleep", "60", when=["ac"], on_lost="pause", lane="other")
    pids = [h.wait_for(lambda j=j: (h.job(j)["runner"] or {}).get("pid"), 15, "the jobs to run") for j in (first, second)]
    (tree / "ACAD" / "online").write_text("0\n")
    for pid in pids:
        h.wait_for(lambda pid=pid: set(tree_states(pid)) == {"T"}, 15, "paused by the lost condition")
    h.cli("resume", "--job", str(first), check=True)
    h.cli("pause", "--job", str(first), check=True)  # by hand, while the charger is still out
    h.cli("pause", "--job", str(second))  # already paused by the condition: now the user's too
    (tree / "ACAD" / "online").write_text("1\n")
    time.sleep(2.5)  # two looks with the condition holding
    for jid, pid in zip((first, second), pids):
        assert set(tree_states(pid)) == {"T"} and h.job(jid)["paused"], jid
    h.cli("resume", "--job", str(first), str(second), check=True)
    for pid in pids:
        h.wait_for(lambda pid=pid: "T" not in tree_states(pid), 10, "continued by hand")
