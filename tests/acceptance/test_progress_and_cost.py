"""Progress and what each run cost (issue 31 items 3 and 4), through the
real daemon and keeper and the real CLI: a job's progress by a line, by
the file named in $SLOTH_PROGRESS_FILE and by a real tqdm bar moves in
`show --json` while it runs; an estimate from past runs when it says
nothing; a job that allocates 200 MB and burns a second of CPU is
recorded within 20% of both, also when the daemon was killed -9 while it
ran (the keeper keeps the cost with the outcome for the next daemon).
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from tests.support.harness import Harness

pytestmark = pytest.mark.acceptance


def add(h: Harness, *args: str) -> int:
    return int(h.cli("add", *args, check=True).stdout.split()[0])


def progress_of(h: Harness, job: int) -> dict | None:
    return h.cli_json("show", str(job), "--json")["jobs"][0]["progress"]


def fraction_reaches(h: Harness, job: int, want: float, source: str) -> dict:
    def look() -> dict | None:
        p = progress_of(h, job)
        return p if p is not None and p["source"] == source and p["fraction"] >= want - 1e-9 else None
    return h.wait_for(look, timeout_s=20, what=f"progress {want} by {source}")


def step_script(h: Harness, body: str) -> str:
    """A job that reports progress in steps, each step once ``go`` holds
    a bigger number (the test moves it on): so what is seen is what was said."""
    path = h.home / "steps.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


STEPS_BY_LINE = """
    import json, os, sys, time
    go = sys.argv[1]
    for i, say in enumerate(["SLOTH_PROGRESS 0.25", '{"progress": 0.5}']):
        while not os.path.exists(f"{go}.{i}"):
            time.sleep(0.02)
        print(f"item {i} of many", flush=True)
        print(say, flush=True)
        for n in range(20000):  # a flood of output after it: no progress in it
            print(f"noise {n}")
        sys.stdout.flush()
    while not os.path.exists(f"{go}.end"):
        time.sleep(0.02)
"""


def test_progress_by_a_line_by_both_conventions_moves_while_it_runs(harness):
    h = harness
    h.start()
    go = h.home / "go"
    job = add(h, "--", sys.executable, step_script(h, STEPS_BY_LINE), str(go))
    h.wait_state(job, "running")
    (go.parent / "go.0").touch()
    first = fraction_reaches(h, job, 0.25, "line")
    assert first["eta_s"] >= 0 and first["at"] > 0  # time left from its rate so far
    (go.parent / "go.1").touch()
    fraction_reaches(h, job, 0.5, "line")
    listed = [j for j in h.cli_json("ls", "--json")["jobs"] if j["id"] == job]
    assert listed[0]["progress"]["fraction"] == 0.5
    table = h.cli("ls").stdout
    assert "50%" in table, table
    assert "50%" in h.cli("show", str(job)).stdout
    (go.parent / "go.end").touch()
    h.wait_state(job, "done")
    assert progress_of(h, job) is None  # done: no progress left on it


FILE_STEPS = """
    import os, sys, time
    go, out = sys.argv[1], os.environ["SLOTH_PROGRESS_FILE"]
    for i, say in enumerate(["0.3", "SLOTH_PROGRESS 0.8"]):
        while not os.path.exists(f"{go}.{i}"):
            time.sleep(0.02)
        with open(out + ".tmp", "w") as f:
            f.write(say + "\\n")
        os.replace(out + ".tmp", out)
    while not os.path.exists(f"{go}.end"):
        time.sleep(0.02)
"""


def test_progress_by_the_file_named_in_the_environment(harness):
    h = harness
    h.start()
    go = h.home / "go"
    job = add(h, "--", sys.executable, step_script(h, FILE_STEPS), str(go))
    h.wait_state(job, "running")
    (go.parent / "go.0").touch()
    fraction_reaches(h, job, 0.3, "file")
    (go.parent / "go.1").touch()
    fraction_reaches(h, job, 0.8, "file")
    (go.parent / "go.end").touch()
    h.wait_state(job, "done")
    assert not list(h.home.rglob("*.progress")), "the progress file is removed with the run"


TQDM_STEPS = """
    import os, sys, time
    from tqdm import tqdm
    go = sys.argv[1]
    bar = tqdm(total=40, mininterval=0)
    for i in range(2):
        while not os.path.exists(f"{go}.{i}"):
            time.sleep(0.02)
        bar.update(10)
    while not os.path.exists(f"{go}.end"):
        time.sleep(0.02)
    bar.close()
"""


def test_progress_from_a_real_tqdm_bar(harness):
    pytest.importorskip("tqdm")
    h = harness
    h.start()
    go = h.home / "go"
    job = add(h, "--", sys.executable, step_script(h, TQDM_STEPS), str(go))
    h.wait_state(job, "running")
    (go.parent / "go.0").touch()
    fraction_reaches(h, job, 0.25, "tqdm")
    (go.parent / "go.1").touch()
    p = fraction_reaches(h, job, 0.5, "tqdm")
    assert p["eta_s"] is None or p["eta_s"] >= 0
    (go.parent / "go.end").touch()
    h.wait_state(job, "done")


def test_time_left_is_estimated_from_past_runs_and_said_to_be(harness):
    h = harness
    h.start()
    for _ in range(2):
        done = add(h, "--label", "nightly", "--", "sleep", "1.5")
        h.wait_state(done, "done")
    job = add(h, "--label", "nightly", "--", "sleep", "30")
    h.wait_state(job, "running")
    p = h.wait_for(lambda: progress_of(h, job), timeout_s=10, what="an estimate")
    assert p["source"] == "estimate"
    assert 0 <= p["fraction"] < 1 and p["eta_s"] is not None and p["eta_s"] <= 1.6
    assert "estimate" in h.cli("show", str(job)).stdout
    h.cli("kill", str(job), check=True)


BURN = """
    import resource, time
    block = bytearray(200 * 1024 * 1024)
    for i in range(0, len(block), 4096):  # touched: resident, not only reserved
        block[i] = 1
    while time.process_time() < 1.0:  # a second of CPU in all (user + system, its start included)
        pass
    own = resource.getrusage(resource.RUSAGE_SELF)
    print("SELF", own.ru_utime + own.ru_stime, own.ru_maxrss * 1024)  # what it knows it used
"""


def _cost_within(h: Harness, job: int) -> dict:
    runs = h.cli_json("show", str(job), "--json")["jobs"][0]["runs"]
    assert [r["attempt"] for r in runs] == [1]
    cost = runs[0]["cost"]
    assert cost["covers"] in ("rusage", "cgroup") and cost["ended"] == "exit 0"
    assert 0.8 <= cost["cpu_s"] <= 1.2, cost  # within 20% of the second it burned
    assert 0.8 * (200 << 20) <= cost["peak_rss_bytes"] <= 1.2 * (200 << 20), cost  # ... and of its 200 MB
    line = next(ln for ln in h.cli("logs", str(job), check=True).stdout.splitlines() if ln.startswith("SELF "))
    own_cpu, own_peak = float(line.split()[1]), int(line.split()[2])
    assert abs(cost["cpu_s"] - own_cpu) <= 0.2 * own_cpu, (cost, own_cpu)  # and of what it says it used
    assert abs(cost["peak_rss_bytes"] - own_peak) <= 0.2 * own_peak, (cost, own_peak)
    assert cost["wall_s"] >= cost["cpu_s"] * 0.9
    return cost


def test_a_runs_cpu_and_peak_memory_are_recorded(harness):
    h = harness
    h.start()
    script = h.home / "burn.py"
    script.write_text(textwrap.dedent(BURN))
    job = add(h, "--", sys.executable, str(script))
    h.wait_state(job, "done", timeout_s=60)
    cost = _cost_within(h, job)
    shown = h.cli("show", str(job)).stdout
    assert "cpu" in shown and "peak" in shown, shown
    listed = h.cli_json("ls", "--json")["jobs"]
    assert [j["cost"] for j in listed if j["id"] == job] == [cost]
    table = h.cli("ls", "--columns", "cpu,mem").stdout
    assert "CPU" in table and "PEAK" in table, table
    assert h.cli("ls", "--columns", "bogus").returncode == 2


def test_the_cost_survives_a_daemon_killed_while_the_job_ran(harness):
    h = harness
    h.start()
    script = h.home / "burn.py"
    script.write_text("import os, sys, time\nwhile not os.path.exists(sys.argv[1]):\n    time.sleep(0.02)\n"
                      + textwrap.dedent(BURN))
    go = h.home / "go"
    job = add(h, "--", sys.executable, str(script), str(go))
    h.wait_state(job, "running")
    h.kill9()  # the keeper keeps the job, then its outcome and cost, for the next daemon
    go.touch()
    h.start()
    h.wait_state(job, "done", timeout_s=60)
    _cost_within(h, job)


def test_the_progress_of_a_job_is_in_wait_json_and_status(harness):
    h = harness
    h.start()
    go = h.home / "go"
    other = add(h, "--label", "batch1", "--", "true")
    h.wait_state(other, "done")
    job = add(h, "--label", "batch1", "--", sys.executable, step_script(h, STEPS_BY_LINE), str(go))
    (go.parent / "go.0").touch()
    fraction_reaches(h, job, 0.25, "line")
    status = h.cli("status").stdout
    assert "batch1: 1/2 done, 1 running" in status, status
    (go.parent / "go.1").touch()
    (go.parent / "go.end").touch()
    out = h.cli("wait", str(job), str(other))
    assert out.returncode == 0
    assert json.loads(h.cli("show", str(job), "--json").stdout)["jobs"][0]["state"] == "done"


def test_waits_live_line_on_a_terminal_says_how_far_the_job_is(harness):
    from tests.support.terminal import Terminal

    h = harness
    h.start()
    go = h.home / "go"
    job = add(h, "--", sys.executable, step_script(h, STEPS_BY_LINE), str(go))
    h.wait_state(job, "running")
    with Terminal([sys.executable, "-m", "sloth_daemon", "wait", str(job)], h.env, h.home) as t:
        t.read_until(rf"job {job} running for \d")
        (go.parent / "go.0").touch()
        t.read_until(r"· 25%")  # the live line moves with the job's own word
        (go.parent / "go.1").touch()
        t.read_until(r"· 50%")
        (go.parent / "go.end").touch()
        assert t.wait() == 0


GROW = ("blocks = []\n"
        "while True:\n"
        "    b = bytearray(10 * 1024 * 1024)\n"
        "    for i in range(0, len(b), 4096):\n"
        "        b[i] = 1\n"
        "    blocks.append(b)\n")


def test_a_job_ended_by_its_memory_limit_shows_the_peak_it_reached(harness):
    h = harness
    h.start()
    job = add(h, "--mem", "100M", "--max-attempts", "1", "--", sys.executable, "-c", GROW)
    h.wait_state(job, "failed", timeout_s=30)
    cost = h.cli_json("show", str(job), "--json")["jobs"][0]["runs"][0]["cost"]
    assert cost["ended"] == "exceeded --mem 100M", cost
    assert 60 << 20 <= cost["peak_rss_bytes"] <= 110 << 20, cost  # it grew to its limit, and no further
    assert "exceeded --mem 100M" in h.cli("show", str(job)).stdout



HOSTILE_BAR = """
    import os, sys, time
    go = sys.argv[1]
    # tqdm's shape with 200 fields of time left: 60**200 seconds, past what a float holds; in one write
    # with a line --fail-on matches, the bar last (the line whose progress counts)
    sys.stdout.write("FATAL: out of luck\\n50%|#####     | 5/10 [00:01<" + "1:" * 200 + "1, 1it/s]\\n")
    sys.stdout.flush()
    while not os.path.exists(go):
        time.sleep(0.02)
"""


def test_a_bar_whose_time_left_no_float_holds_is_no_progress_and_the_watchdog_still_sees_its_chunk(harness):
    """The bar's time left overflowed float() in the keeper's reader, which then skipped the
    chunk's --fail-on match (and took the chunk for no output at all, for --stall)."""
    h = harness
    h.start()
    go = h.home / "go"
    job = add(h, "--fail-on", "FATAL", "--", sys.executable, step_script(h, HOSTILE_BAR), str(go))
    try:
        ended = h.wait_state(job, "done", "failed", timeout_s=20)
    finally:
        go.touch()
    assert ended["state"] == "failed" and "matched --fail-on" in ended["message"], ended
