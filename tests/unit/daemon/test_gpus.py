"""GPU sharing's parts (docs/gpus.md): nvidia-smi's real CSV output read,
milli-share accounting, the rules of giving a GPU, the probe's cache and
timeout (an injected clock; a real test nvidia-smi on PATH)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from sloth_daemon.checks import gate_json, needs_map
from sloth_daemon.cli.add_options import gate_fields
from sloth_daemon.config import from_mapping
from sloth_daemon.daemon.gpus import App, GpuProbe, Reading, owners_of, parse_apps, parse_gpus, unfit, wrong_gpu
from sloth_daemon.daemon.resources import Resources, gpu_mem_of, needs_of
from sloth_daemon.errors import BadRequest, ConfigError
from tests.support.nvidia_smi import UUIDS, fake_smi

MIB = 1024 * 1024
# As nvidia-smi prints them (two A100-SXM4-80GB; --format=csv,noheader,nounits, and --format=csv)
GPUS_NOHEADER = ("0, GPU-fd189414-e0f6-58a0-7031-fefe0ce43b1d, 81920, 2, 81226\n"
                 "1, GPU-121ebc1f-3e5d-139d-7aac-57311d5bafc7, 81920, 40962, 40446\n")
GPUS_CSV = ("index, uuid, memory.total [MiB], memory.used [MiB], memory.free [MiB]\n"
            "0, GPU-fd189414-e0f6-58a0-7031-fefe0ce43b1d, 81920 MiB, 2 MiB, 81226 MiB\n")
APPS_CSV = ("pid, gpu_uuid, used_gpu_memory [MiB]\n"
            "10042, GPU-121ebc1f-3e5d-139d-7aac-57311d5bafc7, 4435 MiB\n")


# ------------------------------------------------------------------ parsing
def test_query_gpu_lines_are_read_with_or_without_header_and_units():
    a, b = parse_gpus(GPUS_NOHEADER)
    assert (a.index, a.uuid, a.total, a.used, a.free) == ("0", UUIDS[0], 81920 * MIB, 2 * MIB, 81226 * MIB)
    assert b.free == 40446 * MIB and b.named("1") and b.named(UUIDS[1]) and not b.named("0")
    (c,) = parse_gpus(GPUS_CSV)
    assert c == a


def test_fields_the_driver_cannot_report_are_unknown_not_zero():
    (g,) = parse_gpus("0, GPU-x, [N/A], [N/A], [Not Supported]\n")
    assert g.total is None and g.free is None
    (app,) = parse_apps("77, GPU-x, [N/A]\n")
    assert app == App(77, "GPU-x", None)


def test_compute_apps_in_both_formats_and_none_running():
    assert parse_apps(APPS_CSV) == [App(10042, UUIDS[1], 4435 * MIB)]
    assert parse_apps("10042, GPU-121ebc1f-3e5d-139d-7aac-57311d5bafc7, 4435\n") == parse_apps(APPS_CSV)
    assert parse_apps("") == [] and parse_apps("pid, gpu_uuid, used_gpu_memory [MiB]\n") == []


@pytest.mark.parametrize("text", ["0, GPU-x, 1, 2\n", "zero, GPU-x, 1, 2, 3\n", "No devices were found\n"])
def test_output_of_another_shape_is_an_error_not_a_guess(text):
    with pytest.raises(ValueError):
        parse_gpus(text)


# -------------------------------------------------------------- ownership
def test_a_process_is_sloths_if_it_or_an_ancestor_carries_a_job_token():
    tokens = {100: "tok-a"}
    parents = {101: 100, 102: 101, 200: 1, 300: 300}
    owners = owners_of([102, 200, 300], read_token=tokens.get, parent=parents.get)
    assert owners == {102: "tok-a", 200: None, 300: None}  # 300: its own parent, never a loop


# ------------------------------------------------------------------ rules
def reading(*, free=(80000, 80000), apps=(), owners=None) -> Reading:
    text = "".join(f"{i}, {UUIDS[i]}, 81920, {81920 - f - 512}, {f}\n" for i, f in enumerate(free))
    listed = [App(pid, UUIDS[g], None if mib is None else mib * MIB) for pid, g, mib in apps]
    return Reading(0.0, parse_gpus(text), listed, owners or {})


def test_a_gpu_used_outside_sloth_beyond_the_allowed_amount_is_not_given():
    r = reading(apps=[(4242, 0, 3000), (4243, 0, 100), (77, 1, 500)], owners={77: "tok-run"})
    assert unfit(r, "0", outside_max=0, want_mem=None, promised={}) == \
        "gpu 0 busy outside sloth (3.0G by pid 4242, 4243; allowed: 0)"
    assert unfit(r, "0", outside_max=4 * 1024 * MIB, want_mem=None, promised={}) is None
    assert unfit(r, "1", outside_max=0, want_mem=None, promised={}) is None  # sloth's own run on it
    r = reading(apps=[(4242, 0, None)])  # an amount it does not say is never taken as small
    assert "an unknown amount" in unfit(r, "0", outside_max=10**12, want_mem=None, promised={})


def test_a_leftover_of_a_run_this_daemon_no_longer_holds_counts_as_outside():
    r = reading(apps=[(55, 0, 2000)], owners={55: "old-run"})
    assert unfit(r, "0", outside_max=0, want_mem=None, promised={}, ours={"old-run"}) is None
    assert "busy outside sloth (2.0G by pid 55" in unfit(r, "0", outside_max=0, want_mem=None, promised={},
                                                           ours={"run-b"})


def test_gpu_mem_is_free_memory_less_what_running_jobs_were_promised_and_have_not_taken():
    r = reading(free=(1000, 30000), apps=[(55, 1, 5000)], owners={55: "run-a"})
    want = 20 * 1024 * MIB
    assert unfit(r, "0", outside_max=0, want_mem=want, promised={}) == "gpu 0 has 1000M free"
    assert unfit(r, "1", outside_max=0, want_mem=want, promised={}) is None
    # run-a asked 20G and uses 5000M of it so far: 15480M more may come
    assert unfit(r, "1", outside_max=0, want_mem=want, promised={"1": [("run-a", want)]}) == \
        "gpu 1 has 14.2G free (15.1G of it promised to running jobs)"
    assert unfit(r, "7", outside_max=0, want_mem=want, promised={}) == "gpu 7: nvidia-smi does not list it"


def test_a_run_on_a_gpu_it_was_not_given_is_found():
    r = reading(apps=[(55, 1, 900), (56, 0, 900)], owners={55: "run-a", 56: "run-a"})
    assert wrong_gpu(r, "run-a", ["0"]) == [(55, "1")]
    assert wrong_gpu(r, "run-a", [UUIDS[0], UUIDS[1]]) == []  # tokens may be UUIDs


# ------------------------------------------------------------- accounting
def wants(r: Resources, n) -> dict:
    return r.wants({"needs": {"gpu": n}})


def test_shares_pack_first_fit_in_the_preferred_order():
    r = Resources({"gpu": ("0", "1")}, order={"gpu": ("1",)}, detect=list)
    assert r.tokens["gpu"] == ["1", "0"]
    free = r.free([])
    got = [r.take(wants(r, 0.5), free) for _ in range(4)]
    assert got == [{"gpu": ["1@500"]}] * 2 + [{"gpu": ["0@500"]}] * 2
    assert r.take(wants(r, 0.5), free) is None


def test_milli_shares_do_not_drift_ten_tenths_fill_a_gpu_exactly():
    r = Resources({"gpu": ("0",)}, detect=list)
    held = []
    for _ in range(10):
        got = r.take(wants(r, 0.1), r.free(held))
        assert got == {"gpu": ["0@100"]}
        held.append(got)
    assert r.free(held) == {"gpu": {"0": 0}}
    assert r.take(wants(r, 0.1), r.free(held)) is None
    assert r.take(wants(r, 0.001), r.free(held[:-1])) == {"gpu": ["0@1"]}


def test_a_share_count_splits_each_gpu_for_whole_needs():
    r = Resources({"gpu": ("0", "1")}, shares={"gpu": 3}, detect=list)
    free = r.free([])
    assert [r.take(wants(r, 1), free) for _ in range(6)] == [{"gpu": ["0@333"]}] * 3 + [{"gpu": ["1@333"]}] * 3
    assert r.take(wants(r, 1), free) is None
    assert r.take(wants(r, 2), r.free([])) == {"gpu": ["0@333", "1@333"]}  # two GPUs, a share of each


def test_a_whole_gpu_job_is_not_starved_by_half_gpu_jobs():
    r = Resources({"gpu": ("0", "1")}, detect=list)
    free = r.free([{"gpu": ["0@500"]}, {"gpu": ["1@500"]}])
    assert r.shortage(wants(r, 1), free) == "waiting for gpu: 1 wanted, 0 of 2 free"
    assert r.take(wants(r, 1), free) is None  # it reserves the GPU that comes free first ...
    assert r.take(wants(r, 0.5), free) == {"gpu": ["1@500"]}  # ... so halves go elsewhere
    assert r.take(wants(r, 0.5), free) is None


def test_an_unfit_gpu_is_neither_given_nor_reserved_and_is_said_first():
    r = Resources({"gpu": ("0", "1")}, detect=list)
    free = r.free([])
    busy = {"0": "gpu 0 busy outside sloth (3.0G by pid 1; allowed: 0)"}

    def unfit_(name: str, tok: str) -> str | None:
        return busy.get(tok)

    assert r.shortage(wants(r, 2), free, None, unfit_) == \
        "waiting for gpu 0 busy outside sloth (3.0G by pid 1; allowed: 0); gpu: 2 wanted, 1 of 2 fit"
    assert r.take(wants(r, 1), free, unfit_) == {"gpu": ["1"]}


def test_gpu_mem_alone_takes_one_gpu_shared_by_memory():
    gate = {"needs": needs_map({"gpu-mem": "20G"})}
    assert gate["needs"] == {"gpu-mem": 20 * 1024 ** 3}
    assert needs_of(gate) == {"gpu": 1} and gpu_mem_of(gate) == 20 * 1024 ** 3
    r = Resources({"gpu": ("0",)}, detect=list)
    assert r.take(r.wants(gate), r.free([{"gpu": ["0@500"]}])) == {"gpu": ["0@1"]}


# ------------------------------------------------------------ the request
def test_needs_take_whole_counts_and_shares_below_one_in_three_decimals():
    assert needs_map({"gpu": 0.5, "licence": 2}) == {"gpu": 0.5, "licence": 2}
    assert needs_map({"gpu": "0.25"}) == {"gpu": 0.25} and needs_map({"gpu": 1.0}) == {"gpu": 1}
    for bad in (0.3333, 1.5, 0, -0.5, "half", True, float("nan"), "0." + "1" * 40):
        with pytest.raises(BadRequest):
            needs_map({"gpu": bad})
    with pytest.raises(BadRequest):
        needs_map({"gpu-mem": 0})
    a = gate_json({"needs": {"gpu": 0.5}})
    assert a == '{"needs":{"gpu":0.5}}' and gate_json({"needs": {"gpu": "0.500"}}) == a


def test_the_cli_reads_shares_and_gpu_mem():
    assert gate_fields(None, None, ["gpu=0.5,gpu-mem=20G"], None) == {"needs": {"gpu": 0.5, "gpu-mem": "20G"}}
    assert gate_fields(None, None, ["gpu", "gpu=2"], None) == {"needs": {"gpu": 3}}
    for bad in ("gpu=1.5", "gpu=x", "gpu=-1"):
        with pytest.raises(BadRequest, match="--needs"):
            gate_fields(None, None, [bad], None)


def test_resources_gpu_as_a_table_in_config():
    s = from_mapping({"resources": {"licence": 2, "gpu": {"tokens": ["0", "1"], "shares": 2, "order": ["1"],
                                                          "outside_max": "1G", "check_s": "2s"}}}, Path("c.toml"))
    assert s.resources == {"licence": ("0", "1"), "gpu": ("0", "1")}
    assert s.resource_opts == {"gpu": {"shares": 2, "order": ("1",), "outside_max": 1 << 30, "check_s": 2.0}}
    s = from_mapping({"resources": {"gpu": {"shares": 4}}}, Path("c.toml"))  # tokens: found on the machine
    assert s.resources == {} and s.resource_opts == {"gpu": {"shares": 4}}
    for bad in ({"gpu": {"shares": 0}}, {"gpu": {"sharse": 2}}, {"gpu": {"order": "1"}},
                {"licence": {"outside_max": "1G"}}, {"gpu": {"outside_max": "lots"}}, {"gpu": ["0@1"]},
                {"GPU": {"shares": 2}}, {"gpu": {"check_s": "0s"}}):
        with pytest.raises(ConfigError):
            from_mapping({"resources": bad}, Path("c.toml"))


# ------------------------------------------------------------------ probe
def test_a_reading_is_kept_briefly_and_a_hanging_nvidia_smi_is_cut_off(tmp_path, monkeypatch):
    smi = fake_smi(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{smi.bindir}:/usr/bin:/bin")
    now = [100.0]
    told = []
    probe = GpuProbe(max_age_s=2.0, timeout_s=0.5, clock=lambda: now[0], on_fresh=told.append)
    assert probe.present() and probe.fresh() is None  # none yet (no loop here: nothing started)
    r = asyncio.run(probe.read())
    assert r.error is None and [g.index for g in r.gpus] == ["0", "1"] and told == [r]
    now[0] += 1.9
    assert probe.fresh() is r  # kept: no new call
    assert len(smi.calls()) == 2  # --query-gpu and --query-compute-apps, once each
    now[0] += 0.2
    assert probe.fresh() is None  # too old: a new one is asked for
    smi.mode("hang")
    t0 = time.monotonic()
    r = asyncio.run(probe.read())
    assert time.monotonic() - t0 < 3
    assert r.error == "--query-gpu gave no answer in 0.5 s" and r.gpus == []
    smi.mode("fail")
    r = asyncio.run(probe.read())
    assert r.error.startswith("exit 9: NVIDIA-SMI has failed")


def test_a_flood_is_cut_at_a_stated_cap_and_a_reading_in_flight_dies_with_the_daemon(tmp_path, monkeypatch):
    import psutil

    smi = fake_smi(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{smi.bindir}:/usr/bin:/bin")
    probe = GpuProbe(timeout_s=5.0)
    smi.mode("flood")
    r = asyncio.run(probe.read())
    assert r.error == "--query-gpu said more than 1024 KiB"
    smi.mode("hang")

    def ours() -> list[psutil.Process]:
        return [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "600"]
                and str(smi.bindir) in p.environ().get("PATH", "")]

    async def stopped_midway() -> None:
        probe.soon()
        for _ in range(100):
            await asyncio.sleep(0.02)
            if ours():
                break
        assert ours(), "nvidia-smi was started"
        probe.stop()
        await asyncio.sleep(0.2)

    asyncio.run(stopped_midway())
    assert ours() == []
