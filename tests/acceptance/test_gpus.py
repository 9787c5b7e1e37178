"""GPUs shared as people share them (issue 33 item 6, docs/gpus.md), through
the real daemon and keeper, with a test `nvidia-smi` on PATH that prints
NVIDIA's real CSV formats from files each test writes
(tests/support/nvidia_smi.py). The last test asks a real GPU where there is one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.harness import TEST_CONFIG, Harness, on_one_queue
from tests.support.nvidia_smi import FakeSmi, fake_smi

pytestmark = pytest.mark.acceptance

GPU_CONFIG = TEST_CONFIG + 'default_concurrency = 6\n[resources.gpu]\ncheck_s = "0.3s"\n'


def start(make_harness, home: Path, config: str = GPU_CONFIG, gpus: int = 2,
          apps: tuple[tuple[int, int, int], ...] = ()) -> tuple[Harness, FakeSmi]:
    """``apps``: compute processes outside sloth, there before the daemon's
    first reading (it keeps a reading 2 s: a change just after is not seen yet)."""
    smi = fake_smi(home / "bin", gpus)
    if apps:
        smi.apps(*apps)
    h = make_harness(config)
    h.start(env={"PATH": f"{smi.bindir}:/usr/bin:/bin"})
    return h, smi


def holder(home: Path) -> tuple[str, Path]:
    """A job that writes where it runs and its pid, then waits for ``go``."""
    out = home / "out"
    out.mkdir(exist_ok=True)
    script = (f'echo "$SLOTH_GPU $CUDA_VISIBLE_DEVICES ${{SLOTH_GPU_SHARE:-1}}" > {out}/$SLOTH_JOB_ID.gpu;'
              f' echo $$ > {out}/$SLOTH_JOB_ID.pid; while [ ! -e {out}/go ]; do sleep 0.05; done')
    return script, out


def add(h: Harness, needs: str, *cmd: str) -> int:
    return int(h.cli("add", "--needs", needs, "--", *cmd, check=True).stdout)


def ls_line(h: Harness, job_id: int) -> str:
    out = h.cli("ls", "-a", check=True).stdout
    return next((ln for ln in out.splitlines() if ln.split()[:1] == [str(job_id)]), "")


def where(out: Path, jid: int) -> list[str]:
    return (out / f"{jid}.gpu").read_text().split()


def test_half_gpu_jobs_run_two_to_a_gpu_and_a_fifth_waits_saying_why(make_harness, home):
    h, smi = start(make_harness, home)
    script, out = holder(home)
    ids = [add(h, "gpu=0.5", "sh", "-c", script) for _ in range(5)]
    for jid in ids[:4]:
        h.wait_state(jid, "running")
        h.wait_for(lambda: (out / f"{jid}.gpu").exists() and where(out, jid), what="the job's gpu written")
    placed = sorted(where(out, j)[0] for j in ids[:4])
    assert placed == ["0", "0", "1", "1"], placed  # first fit: GPU 0 full before GPU 1
    assert all(where(out, j)[0] == where(out, j)[1] and where(out, j)[2] == "0.5" for j in ids[:4])
    time.sleep(0.5)
    fifth = h.job(ids[4])
    assert fifth["state"] == "queued"
    assert fifth["wait_reason"] == "waiting for gpu: a 0.5 share wanted, 0 of 2 with that free"
    assert "waiting for gpu: a 0.5 share" in ls_line(h, ids[4])
    shown = h.cli("show", str(ids[0]), check=True).stdout.splitlines()
    gpu = where(out, ids[0])[0]
    assert f"  gpu       CUDA_VISIBLE_DEVICES={gpu}  (shares: 0.5 of gpu {gpu})" in shown, shown
    assert "  needs     gpu=0.5" in shown
    (out / "go").touch()
    for jid in ids:
        h.wait_state(jid, "done", timeout_s=30)


def test_a_share_count_in_config_puts_two_whole_gpu_jobs_on_each_gpu(make_harness, home):
    h, smi = start(make_harness, home, GPU_CONFIG + "shares = 2\norder = [\"1\", \"0\"]\n")
    script, out = holder(home)
    ids = [add(h, "gpu=1", "sh", "-c", script) for _ in range(3)]
    for jid in ids:
        h.wait_state(jid, "running")
        h.wait_for(lambda: (out / f"{jid}.gpu").exists() and where(out, jid), what="the job's gpu written")
    # the preferred order: GPU 1 first, filled to its two shares, then GPU 0
    assert [where(out, j)[0] for j in ids] == ["1", "1", "0"]
    assert [where(out, j)[2] for j in ids] == ["0.5"] * 3
    (out / "go").touch()
    for jid in ids:
        h.wait_state(jid, "done", timeout_s=30)


def test_gpu_mem_goes_where_nvidia_smi_says_it_is_free_and_counts_what_was_promised(make_harness, home):
    smi = fake_smi(home / "bin", 2)
    smi.gpus(1000, 30000)  # MiB free: GPU 0 nearly full, GPU 1 has 29.3G (before the daemon's first reading,
    h = make_harness(GPU_CONFIG)  # which it keeps for 2 s: a change just after it would not be seen yet)
    h.start(env={"PATH": f"{smi.bindir}:/usr/bin:/bin"})
    h.wait_for(lambda: h.call("status")["conditions"]["gpus"], what="the reading taken at start")
    p = h.cli("add", "--needs", "gpu-mem=100G", "--", "true")  # more than any GPU here has: refused at once
    assert p.returncode != 0 and "the largest GPU here has 80G" in p.stderr, p.stderr
    script, out = holder(home)
    first = add(h, "gpu-mem=20G", "sh", "-c", script)
    h.wait_state(first, "running")
    h.wait_for(lambda: (out / f"{first}.gpu").exists() and where(out, first), what="the job's gpu written")
    assert where(out, first)[:2] == ["1", "1"]
    # nvidia-smi still says 29.3G free (the first has not allocated yet): 20G of it is promised
    second = add(h, "gpu-mem=20G", "true")
    # the first reason said may be the reading still being taken (a loaded machine): wait for the free memory
    why = h.wait_for(lambda: (r := h.job(second)["wait_reason"] or "") and "free" in r and r, what="a reason")
    assert "gpu 0 has 1000M free" in why and "gpu 1 has 9.3G free (20G of it promised to running jobs)" in why, why
    assert h.job(second)["gate"]["needs"] == {"gpu-mem": 20 * 1024 ** 3}
    assert "  needs     gpu-mem=20G" in h.cli("show", str(second), check=True).stdout

    (out / "go").touch()
    h.wait_state(first, "done")
    h.wait_state(second, "done", timeout_s=20)


def test_a_gpu_busy_outside_sloth_is_not_given_and_ls_says_so(make_harness, home):
    # someone else's python on GPU 0 (not ours to read: outside sloth)
    h, smi = start(make_harness, home, apps=((999_999_1, 0, 3000),))
    script, out = holder(home)
    first = add(h, "gpu=1", "sh", "-c", script)
    h.wait_state(first, "running")
    h.wait_for(lambda: (out / f"{first}.gpu").exists() and where(out, first), what="the job's gpu written")
    assert where(out, first)[0] == "1"
    second = add(h, "gpu=1", "true")
    h.wait_for(lambda: "waiting for gpu 0 busy" in ls_line(h, second), what="ls saying why")
    assert h.job(second)["wait_reason"] == ("waiting for gpu 0 busy outside sloth (2.9G by pid 9999991; allowed: 0);"
                                            " gpu: 1 wanted, 0 of 2 fit")
    smi.apps()  # it let go: the next look (check_s) gives GPU 0 out
    h.wait_state(second, "done", timeout_s=15)
    (out / "go").touch()
    h.wait_state(first, "done")


def test_a_gpu_used_outside_below_the_configured_amount_is_still_given(make_harness, home):
    h, smi = start(make_harness, home, GPU_CONFIG + 'outside_max = "1G"\n', gpus=1,
                   apps=((999_999_1, 0, 300),))  # a display server's 300M
    jid = add(h, "gpu=1", "true")
    h.wait_state(jid, "done", timeout_s=15)


def test_a_process_on_a_gpu_it_was_not_given_is_said_in_its_history(make_harness, home):
    h, smi = start(make_harness, home)
    script, out = holder(home)
    jid = add(h, "gpu=1", "sh", "-c", script)
    h.wait_state(jid, "running")
    h.wait_for(lambda: (out / f"{jid}.pid").exists() and (out / f"{jid}.pid").read_text().strip(), what="the job's pid written")
    given = where(out, jid)[0]
    pid = int((out / f"{jid}.pid").read_text())
    other = 1 - int(given)
    smi.apps((pid, other, 900), header=False)  # it ignored CUDA_VISIBLE_DEVICES
    ev = h.wait_for(lambda: [e for e in h.events(jid) if e["kind"] == "gpu"], what="a gpu line in its history")
    assert f"pid {pid} uses gpu {other}; it was given gpu {given}" in ev[0]["message"], ev
    assert f"uses gpu {other}" in h.cli("show", str(jid), check=True).stdout
    time.sleep(1.0)  # later looks see it again: one line per run
    assert len([e for e in h.events(jid) if e["kind"] == "gpu"]) == 1
    (out / "go").touch()
    h.wait_state(jid, "done")


def test_cpu_jobs_never_wait_behind_gpu_jobs(make_harness, home):
    """The rule: a GPU job that cannot have its GPU reserves GPUs, never the
    lane's slots; so CPU jobs added after a lane full of waiting GPU jobs run
    at once, an ungated one and one that waits for a token of its own."""
    config = TEST_CONFIG + 'default_concurrency = 2\n[resources]\nlicence = 1\n[resources.gpu]\ncheck_s = "0.3s"\n'
    h, smi = start(make_harness, home, config, apps=((999_999_1, 0, 3000), (999_999_2, 1, 3000)))  # both busy
    waiting = [add(h, "gpu=1", "true") for _ in range(8)] + [add(h, "gpu=0.5", "true")]
    h.wait_for(lambda: all("busy outside sloth" in (h.job(j)["wait_reason"] or "") for j in waiting),
               what="the GPU jobs waiting")
    cpu = int(h.cli("add", "--", "true", check=True).stdout)
    gated_cpu = add(h, "licence=1", "true")
    h.wait_state(cpu, "done", timeout_s=5)
    h.wait_state(gated_cpu, "done", timeout_s=5)
    assert all(h.job(j)["state"] == "queued" for j in waiting)


def test_a_hanging_nvidia_smi_never_blocks_the_daemon(make_harness, home):
    h, smi = start(make_harness, home)
    smi.mode("hang")
    # the reading taken at start is kept 2 s: past that, the job's claim asks nvidia-smi again (and it hangs)
    h.wait_for(lambda: ((h.call("status")["conditions"] or {}).get("gpus") or {}).get("age_s", 0) > 2.0,
               what="the start's reading 2 s old")
    jid = add(h, "gpu=1", "true")
    time.sleep(0.3)
    t0 = time.monotonic()
    cpu = int(h.cli("add", "--", "true", check=True).stdout)
    h.wait_state(cpu, "done", timeout_s=5)
    h.call("status")
    assert time.monotonic() - t0 < 4, "the daemon waited for nvidia-smi"
    assert h.job(jid)["wait_reason"] == "waiting for nvidia-smi's reading of the GPUs"
    # after its timeout (5 s) the GPU is given by sloth's own accounting; a gpu-mem job waits, saying why
    h.wait_state(jid, "done", timeout_s=20)
    smi.mode("fail")
    mem = add(h, "gpu-mem=1G", "true")
    h.wait_for(lambda: "couldn't communicate with the NVIDIA driver" in (h.job(mem)["wait_reason"] or ""),
               timeout_s=20, what="why it waits")
    assert "gpus     nvidia-smi failed: exit 9: NVIDIA-SMI has failed" in h.cli("status", check=True).stdout
    smi.mode("ok")
    h.wait_state(mem, "done", timeout_s=20)


def test_needs_that_are_no_count_or_share_are_refused_and_change_nothing(make_harness, home):
    h, smi = start(make_harness, home)
    for bad in ("gpu=1.5", "gpu=0.0001", "gpu=-1", "gpu-mem=lots", "gpu=abc"):
        p = h.cli("add", "--needs", bad, "--", "true")
        assert p.returncode != 0 and "--needs" in p.stderr, (bad, p.stderr)
    from sloth_daemon.errors import SlothError
    for needs in ({"gpu": 0.3333}, {"gpu": 1.5}, {"gpu-mem": 0}, {"gpu-mem": "x"}, {"gpu": True}):
        with pytest.raises(SlothError):
            h.call("add", jobs=[{"command": ["true"], "needs": needs}], common={"cwd": str(home)})
    assert h.cli_json("ls", "-a")["jobs"] == []


def test_a_real_gpu_when_there_is_one(make_harness, home):
    """On a machine with an NVIDIA GPU: a --needs gpu=1 job sees the GPU it
    was given, as CUDA numbers it, and the daemon's reading lists it."""
    smi = shutil.which("nvidia-smi")
    if smi is None or subprocess.run([smi, "-L"], capture_output=True, timeout=10).returncode != 0:
        pytest.skip("no NVIDIA GPU here (`nvidia-smi -L` is missing or fails): the real-GPU test runs only where one is")
    h = make_harness(GPU_CONFIG)
    h.start(env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    out = home / "real"
    jid = add(h, "gpu=1", "sh", "-c", f"echo $CUDA_VISIBLE_DEVICES > {out}; nvidia-smi -L >> {out}")
    h.wait_state(jid, "done", timeout_s=60)
    given, *listed = out.read_text().splitlines()
    assert f"GPU {given}:" in "\n".join(listed), (given, listed)  # one nvidia-smi lists, by its index
    assert h.call("status")["conditions"]["gpus"]["gpus"], "the daemon's reading lists the GPUs"


def test_shares_held_by_runs_stay_held_across_a_daemon_kill9(make_harness, home):
    """A run's share is written with its token ("0@500"): the keeper keeps the
    runs, the restarted daemon finds the GPU half held by each, not free."""
    h, smi = start(make_harness, home, gpus=1)
    script, out = holder(home)
    ids = [add(h, "gpu=0.5", "sh", "-c", script) for _ in range(2)]
    for jid in ids:
        h.wait_state(jid, "running")
    h.kill9()
    h.start(env={"PATH": f"{smi.bindir}:/usr/bin:/bin"})
    third = add(h, "gpu=0.5", "true")
    why = h.wait_for(lambda: h.job(third)["wait_reason"], what="a reason")
    assert why == "waiting for gpu: a 0.5 share wanted, 0 of 1 with that free"
    assert "tokens   gpu 0/1 free (0 counting shares)" in h.cli("status", check=True).stdout
    (out / "go").touch()
    for jid in [*ids, third]:
        h.wait_state(jid, "done", timeout_s=30)


def test_shares_on_a_postgresql_queue_and_across_a_kill9(make_harness, pg_fresh, home):
    """The other engine: a share is the same token text in PostgreSQL's job row."""
    smi = fake_smi(home / "bin", 1)
    (h,) = on_one_queue(make_harness, pg_fresh(), {"m1": GPU_CONFIG}, env={"PATH": f"{smi.bindir}:/usr/bin:/bin"})
    script, out = holder(home)
    ids = [add(h, "gpu=0.5", "sh", "-c", script) for _ in range(2)]
    for jid in ids:
        h.wait_state(jid, "running", timeout_s=60)
    assert sorted(h.job(j)["tokens"]["gpu"][0] for j in ids) == ["0@500", "0@500"]
    h.kill9()
    h.start(env={"PATH": f"{smi.bindir}:/usr/bin:/bin"})
    third = add(h, "gpu=0.5", "true")
    why = h.wait_for(lambda: h.job(third)["wait_reason"], what="a reason")
    assert why == "waiting for gpu: a 0.5 share wanted, 0 of 1 with that free"
    (out / "go").touch()
    for jid in [*ids, third]:
        h.wait_state(jid, "done", timeout_s=60)


def test_a_reload_changes_shares_for_new_jobs_and_leaves_running_ones_as_they_hold(make_harness, home):
    h, smi = start(make_harness, home, gpus=1)
    script, out = holder(home)
    whole = add(h, "gpu=1", "sh", "-c", script)
    h.wait_state(whole, "running")
    (h.home / "config.toml").write_text(GPU_CONFIG + "shares = 2\n")
    p = h.cli("daemon", "reload", check=True)
    assert "resources.gpu: {'check_s': 0.3} -> {'check_s': 0.3, 'shares': 2}" in p.stdout + p.stderr
    half = add(h, "gpu=1", "true")  # now half a GPU; the running job still holds all of it
    why = h.wait_for(lambda: h.job(half)["wait_reason"], what="a reason")
    assert why == "waiting for gpu: a 0.5 share wanted, 0 of 1 with that free"
    (out / "go").touch()
    h.wait_state(half, "done", timeout_s=20)
    assert any("holds gpu 0 (0.5 share)" in (e["message"] or "") for e in h.events(half)), h.events(half)
