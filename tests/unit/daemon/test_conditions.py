"""Run conditions and named resources, unit by unit (issue 24): the
readers of each platform's tools on output captured from them, the power
supply tree, the cache that keeps the daemon from looking too often, the
token rule that keeps a big job from starving. macOS's ioreg path is only
tested here (no macOS machine ran it)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sloth_daemon.checks import condition, gate_json
from sloth_daemon.daemon.conditions import (
    Conditions, Observer, Power, Unobservable, parse_busctl, parse_gdbus, parse_hid_idle, parse_nmcli_general,
    parse_nmcli_metered, power_from_sysfs,
)
from sloth_daemon.daemon.resources import Resources, environment, found_gpus, parse_nvidia_smi
from sloth_daemon.errors import BadRequest

# The tools' output formats, written out by hand (none of ioreg, nvidia-smi, a system bus,
# logind or NetworkManager exists on the machine these were written on; see docs/conditions.md).
IOREG = """+-o IOHIDSystem  <class IOHIDSystem, id 0x100000466, registered, matched, active, busy 0 (0 ms), retain 28>
    {
      "IOClass" = "IOHIDSystem"
      "HIDIdleTime" = 2718926375
      "HIDParameters" = {"HIDClickTime"=500000000}
    }
"""
NVIDIA_SMI = """GPU 0: NVIDIA GeForce RTX 3090 (UUID: GPU-5a3b8f0e-4c1d-2e3f-9a8b-7c6d5e4f3a2b)
GPU 1: NVIDIA GeForce RTX 3090 (UUID: GPU-1b2c3d4e-5f6a-7b8c-9d0e-1f2a3b4c5d6e)
"""


def test_busctl_and_gdbus_answers_are_read():
    assert parse_busctl("b true\n") is True and parse_busctl("b false") is False
    assert parse_busctl("t 1717171717171717\n") == 1717171717171717 and parse_busctl("u 70") == 70
    assert parse_busctl('s "full"') == "full"
    assert parse_gdbus("(<true>,)\n") is True and parse_gdbus("(<uint64 1717171717>,)") == 1717171717
    assert parse_gdbus("(<uint32 4>,)") == 4 and parse_gdbus("(<'x'>,)") == "x"
    for bad in ("", "garbage", "(x)"):
        with pytest.raises(ValueError):
            parse_gdbus(bad)
    with pytest.raises(ValueError):
        parse_busctl("a{sv} 0")


def test_macos_idle_time_comes_from_hid_idle_time_in_nanoseconds():
    assert parse_hid_idle(IOREG) == pytest.approx(2.718926375)
    with pytest.raises(ValueError):
        parse_hid_idle("+-o IOHIDSystem\n")
    obs = Observer(run=lambda argv: IOREG, platform="darwin")
    assert Conditions(obs).why_not("idle=2s") is None
    assert Conditions(obs).why_not("idle=1m") == "waiting for 1m idle (idle 2.7s)"


def test_nmcli_answers_are_read():
    assert parse_nmcli_general("connected:full\n") == (True, "full")
    assert parse_nmcli_general("disconnected:none\n") == (False, "none")
    assert parse_nmcli_metered("GENERAL.METERED:no (guessed)\nGENERAL.METERED:yes\n") is False
    assert parse_nmcli_metered("GENERAL.METERED:yes (guessed)\n") is True
    assert parse_nmcli_metered("GENERAL.METERED:unknown\n") is None


def test_nvidia_smi_lists_the_gpus_and_no_nvidia_smi_lists_none():
    assert parse_nvidia_smi(NVIDIA_SMI) == ["0", "1"]
    assert found_gpus(run=lambda argv: NVIDIA_SMI, which=lambda n: "/usr/bin/nvidia-smi") == ["0", "1"]
    assert found_gpus(which=lambda n: None) == []

    def fails(argv):
        raise subprocess.CalledProcessError(9, argv, "", "NVIDIA-SMI has failed")
    assert found_gpus(run=fails, which=lambda n: "/x") == []
    assert Resources({}, detect=lambda: ["0", "1"]).tokens == {"gpu": ["0", "1"]}
    assert Resources({"gpu": ("7",)}, detect=lambda: ["0", "1"]).tokens == {"gpu": ["7"]}  # the file wins


# ------------------------------------------------------------------ power
def supply(root: Path, name: str, **files: str) -> None:
    (root / name).mkdir(parents=True)
    for k, v in files.items():
        (root / name / k).write_text(v + "\n")


def test_power_from_the_supply_tree(tmp_path):
    assert power_from_sysfs(tmp_path / "absent") == Power(True, None)  # a container: mains
    desk = tmp_path / "desk"
    desk.mkdir()
    assert power_from_sysfs(desk) == Power(True, None)
    lap = tmp_path / "lap"
    supply(lap, "ADP1", type="Mains", online="0")
    supply(lap, "BAT0", type="Battery", capacity="41", status="Discharging")
    supply(lap, "hidpp_battery_0", type="Battery", scope="Device", capacity="5", status="Discharging")
    assert power_from_sysfs(lap) == Power(False, 41.0)  # the mouse's battery is not the machine's
    (lap / "ADP1" / "online").write_text("1\n")
    assert power_from_sysfs(lap) == Power(True, 41.0)
    nomains = tmp_path / "nomains"
    supply(nomains, "BAT1", type="Battery", capacity="80", status="Charging")
    assert power_from_sysfs(nomains) == Power(True, 80.0)
    (nomains / "BAT1" / "status").write_text("Discharging\n")
    assert power_from_sysfs(nomains) == Power(False, 80.0)


def test_ac_and_battery_conditions(tmp_path):
    root = tmp_path / "ps"
    supply(root, "AC", type="Mains", online="0")
    supply(root, "BAT0", type="Battery", capacity="30", status="Discharging")
    c = Conditions(Observer(platform="linux", power_root=root), max_age_s=0)
    assert c.why_not("ac") == "waiting for mains power"
    assert c.why_not("battery>=40") == "waiting for mains power or battery >= 40% (at 30%)"
    assert c.why_not("battery>=30") is None
    (root / "AC" / "online").write_text("1\n")
    assert c.why_not("ac") is None and c.why_not("battery>=90") is None  # met on mains power
    assert Conditions(Observer(platform="linux", power_root=tmp_path / "none")).why_not("battery>=90") is None


def test_a_look_is_kept_for_max_age_and_forget_looks_again(tmp_path):
    root = tmp_path / "ps"
    supply(root, "AC", type="Mains", online="0")
    supply(root, "BAT0", type="Battery", capacity="30", status="Discharging")
    now = [0.0]
    c = Conditions(Observer(platform="linux", power_root=root), max_age_s=30, clock=lambda: now[0])
    assert c.why_not("ac") is not None and c.looks == 1
    (root / "AC" / "online").write_text("1\n")
    now[0] = 29.0
    assert c.why_not("ac") is not None and c.looks == 1  # kept: no look
    now[0] = 30.0
    assert c.why_not("ac") is None and c.looks == 2
    (root / "AC" / "online").write_text("0\n")
    c.forget(["power"])
    assert c.why_not("ac") is not None and c.looks == 3


# ------------------------------------------------------------- logind, NM
def fake_bus(answers: dict[str, str]):
    calls = []

    def run(argv):
        calls.append(argv)
        for key, out in answers.items():
            if key in argv:
                return out
        raise subprocess.CalledProcessError(1, argv, "", "Failed to connect to bus: No such file or directory")
    return run, calls


def test_idle_from_logind_through_busctl():
    run, calls = fake_bus({"IdleHint": "b true\n", "IdleSinceHintMonotonic": "t 100000000\n"})
    obs = Observer(run=run, which=lambda n: f"/usr/bin/{n}", platform="linux", monotonic=lambda: 700.0)
    assert obs.idle_s() == pytest.approx(600.0)  # since 100 s on the monotonic clock
    assert calls[0][:4] == ["busctl", "--system", "get-property", "org.freedesktop.login1"]
    assert Conditions(obs).why_not("idle=10m") is None
    assert Conditions(obs).why_not("idle=11m") == "waiting for 11m idle (idle 10m)"
    run, _ = fake_bus({"IdleHint": "b false\n"})
    assert Observer(run=run, which=lambda n: "/x", platform="linux").idle_s() == 0.0


def test_idle_through_gdbus_when_busctl_is_missing():
    run, calls = fake_bus({"IdleHint": "(<true>,)\n", "IdleSinceHintMonotonic": "(<uint64 1000000>,)\n"})
    obs = Observer(run=run, which=lambda n: "/usr/bin/gdbus" if n == "gdbus" else None, platform="linux",
                   monotonic=lambda: 61.0)
    assert obs.idle_s() == pytest.approx(60.0) and calls[0][0] == "gdbus"


def test_no_bus_is_unobservable_and_said_at_add_never_a_pass():
    run, _ = fake_bus({})
    c = Conditions(Observer(run=run, which=lambda n: "/usr/bin/busctl" if n == "busctl" else None,
                            platform="linux"))
    with pytest.raises(Unobservable) as e:
        c.observable(["idle=10m"])
    assert "Failed to connect to bus" in e.value.message and "logind" in (e.value.hint or "")
    with pytest.raises(Unobservable) as e:
        c.observable(["online"])
    assert "NetworkManager" in e.value.message
    assert c.first_reason(["online"]).startswith("waiting: --when online cannot be observed now")
    none = Conditions(Observer(run=run, which=lambda n: None, platform="linux"))
    with pytest.raises(Unobservable, match="neither busctl nor gdbus"):
        none.observable(["idle=1m"])


def test_network_from_networkmanager():
    run, _ = fake_bus({"State": "u 70\n", "Connectivity": "u 4\n", "Metered": "u 4\n"})
    c = Conditions(Observer(run=run, which=lambda n: "/x", platform="linux"))
    assert c.why_not("online") is None and c.why_not("unmetered") is None
    run, _ = fake_bus({"State": "u 50\n", "Connectivity": "u 2\n", "Metered": "u 1\n"})
    c = Conditions(Observer(run=run, which=lambda n: "/x", platform="linux"))
    assert c.why_not("online") == "waiting for the network (NetworkManager: a captive portal)"
    run, _ = fake_bus({"State": "u 70\n", "Connectivity": "u 4\n", "Metered": "u 3\n"})
    c = Conditions(Observer(run=run, which=lambda n: "/x", platform="linux"))
    assert c.why_not("online") is None and c.why_not("unmetered") == "waiting for an unmetered network"


def test_network_through_nmcli_when_the_bus_tools_fail():
    answers = {"STATE,CONNECTIVITY": "connected:full\n", "GENERAL.METERED": "GENERAL.METERED:yes\n"}
    run, _ = fake_bus(answers)
    c = Conditions(Observer(run=run, which=lambda n: "/usr/bin/nmcli" if n == "nmcli" else None, platform="linux"))
    assert c.why_not("online") is None and c.why_not("unmetered") == "waiting for an unmetered network"


def test_disk_and_load(tmp_path, monkeypatch):
    obs = Observer(platform="linux")
    monkeypatch.setattr(obs, "disk_free", lambda path: 3 * 1024**3)
    monkeypatch.setattr(obs, "load", lambda: 2.5)
    c = Conditions(obs)
    assert c.why_not("disk>=2G", str(tmp_path)) is None
    assert c.why_not("disk>=5G", str(tmp_path)) == f"waiting for 5G free in {tmp_path} (3.0G free)"
    assert c.why_not("load<3") is None and c.why_not("load<2") == "waiting for load below 2 (now 2.50)"
    assert Conditions().why_not("disk>=1K", str(tmp_path)) is None  # the real free space, real psutil


# -------------------------------------------------------------- spellings
@pytest.mark.parametrize("given, canonical", [
    ("AC", "ac"), ("battery >= 040", "battery>=40"), ("idle=600", "idle=10m"), ("idle=1h30m", "idle=1h30m"),
    ("disk>=5120M", "disk>=5G"), ("disk>=1.5g", "disk>=1536M"), ("load<2.0", "load<2"), (" online ", "online"),
])
def test_conditions_have_one_spelling(given, canonical):
    assert condition(given) == canonical


def test_a_gate_is_one_canonical_text_and_none_without_one():
    assert gate_json({}) is None and gate_json({"slots": 1, "on_lost": "continue"}) is None
    a = gate_json({"when": ["load<2", "AC"], "needs": {"licence": 1, "gpu": 2}, "slots": 2})
    b = gate_json({"slots": 2, "needs": {"gpu": 2, "licence": 1}, "when": ["ac", "load < 2.0"]})
    assert a == b == '{"when":["ac","load<2"],"needs":{"gpu":2,"licence":1},"slots":2}'


# -------------------------------------------------------------- resources
def test_the_oldest_waiting_job_reserves_what_is_free_of_what_it_needs():
    r = Resources({"gpu": ("0", "1", "2")}, detect=list)
    free = r.free([{"gpu": ["1"]}])  # one run holds gpu 1
    assert free == {"gpu": {"0": 1000, "1": 0, "2": 1000}}
    three, one, two = (r.wants({"needs": {"gpu": n}}) for n in (3, 1, 2))
    assert r.shortage(three, free) == "waiting for gpu: 3 wanted, 2 of 3 free"
    assert r.take(three, free) is None  # the big job waits ...
    assert free == {"gpu": {"1": 0}}  # ... and reserves the two free ones
    assert r.take(one, free) is None  # so a small job behind it does not take one
    free = r.free([])
    assert r.take(two, free) == {"gpu": ["0", "1"]} and free == {"gpu": {"0": 0, "1": 0, "2": 1000}}


def test_needs_this_machine_can_never_meet_are_refused():
    r = Resources({"gpu": ("0", "1"), "licence": ("0", "1", "2")}, detect=list)
    r.check({"gpu": 2, "licence": 3})
    with pytest.raises(BadRequest, match="has 2 gpu"):
        r.check({"gpu": 3})
    with pytest.raises(BadRequest, match="no resource 'tpu'.*gpu \\(2\\), licence \\(3\\)"):
        r.check({"tpu": 1})


def test_a_run_finds_its_tokens_in_its_environment():
    assert environment({"gpu": ["1", "3"], "licence": ["0"]}) == {
        "SLOTH_GPU": "1,3", "CUDA_VISIBLE_DEVICES": "1,3", "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "SLOTH_LICENCE": "0"}
    assert environment({"gpu": ["1@500"]}) == {  # a share: the token without its share, and the share said
        "SLOTH_GPU": "1", "CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "SLOTH_GPU_SHARE": "0.5"}
    assert environment(None) == {}


def test_a_batch_of_adds_looks_once_not_once_per_job():
    run, calls = fake_bus({"IdleHint": "b false\n"})
    now = [0.0]
    c = Conditions(Observer(run=run, which=lambda n: "/usr/bin/busctl", platform="linux"), clock=lambda: now[0])
    for _ in range(1000):
        c.observable(["idle=10m"])
    assert len(calls) == 1
    now[0] = 6.0
    c.observable(["idle=10m"])
    assert len(calls) == 2  # an add a while later looks again
