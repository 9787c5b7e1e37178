"""A night through the real daemon, drawn (issue 31, item 2): runs, a
failure, a two-hour sleep (the repository's LD_PRELOAD clock shim moves
the daemon's wall and boot clocks, as a resume does), a daemon stopped and
started again, and one killed -9 (a crash, seen by the next start). Then:

- `sloth timeline` in a real pseudo-terminal at 80 columns, with and
  without colour: the machine's row says the sleep, each lane has its row,
  the failure is marked;
- `sloth timeline --html` opened in a real headless Chromium (Debian's
  `chromium`): a bar per run, the sleep gap drawn and labelled, the
  downtime too, a job whose command and log hold `</script>` and
  `<img onerror>` shown as text and never run, no script error; a
  screenshot kept under pytest's tmp path (its location printed).

Chromium missing: skipped, except in CI (CI=true), where it fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.browser import Browser
from tests.support.terminal import Terminal

pytestmark = pytest.mark.acceptance
HOUR = 3600
HOSTILE = "echo '</script><img src=x onerror=\"document.title=1\">'; exit 4"
BROWSER_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.environ.get("CI") == "true":
        pytest.fail("chromium is not installed: CI must have it (.ci/run installs it)")
    pytest.skip("chromium is not installed (apt-get install chromium): the page is not opened in a browser")


def browse(tmp_path: Path, page: Path, *args: str, fragment: str = "") -> subprocess.CompletedProcess[str]:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"  # a fresh one each time
    url = page.as_uri() + (f"#{fragment}" if fragment else "")
    return subprocess.run([chromium(), *BROWSER_FLAGS, f"--user-data-dir={profile}", *args, url],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)


@pytest.fixture
def night(harness, fakeclock):
    """The scripted night; returns the harness and the timeline's JSON."""
    h = harness
    h.daemon_env.update(fakeclock.env())
    h.start()
    ok = h.add("true")
    slow = h.add("sleep", "0.3", lane="backup")
    bad = h.add("sh", "-c", "exit 3", max_attempts=1)
    hostile = h.add("sh", "-c", HOSTILE, max_attempts=1)
    for job in (ok, slow, bad, hostile):
        h.wait_state(job, "done", "failed")
    fakeclock.jump(2 * HOUR)  # the laptop slept two hours
    h.wait_for(lambda: [m for m in h.call("timeline", since_s=6 * HOUR)["machine"] if m["kind"] == "sleep"],
               what="the sleep recorded")
    assert h.stop() == 0  # a clean stop ...
    h.start()  # ... and a start
    after = h.add("true", lane="backup")
    h.wait_state(after, "done")
    h.kill9()  # a crash: its next start says so
    h.start()
    data = h.cli_json("timeline", "--since", "6h")
    h.env.update(fakeclock.env())  # the command's clock is the daemon's (the read without a daemon uses its own)
    return h, data, {"ok": ok, "slow": slow, "bad": bad, "hostile": hostile, "after": after}


def test_the_night_is_recorded_sleep_stop_and_crash_and_drawn_in_a_terminal(night):
    h, data, ids = night
    runs = {j["id"]: [r["outcome"] for r in j["runs"]] for j in data["jobs"]}
    assert runs[ids["ok"]] == ["done"] and runs[ids["bad"]] == ["failed"] and runs[ids["after"]] == ["done"]
    ok = next(j for j in data["jobs"] if j["id"] == ids["ok"])  # each run with what it cost (the keeper's measure)
    assert ok["runs"][0]["cost"]["wall_s"] >= 0 and ok["runs"][0]["cost"]["ended"] == "exit 0", ok["runs"]
    sleeps = [m for m in data["machine"] if m["kind"] == "sleep"]
    assert len(sleeps) == 1 and 2 * HOUR - 5 < sleeps[0]["end_at"] - sleeps[0]["start_at"] < 2 * HOUR + 5
    ups = [m["detail"] for m in data["machine"] if m["kind"] == "up"]
    assert ups == ["stopped: signal SIGTERM", "crashed", "running"], data["machine"]
    assert [g["why"] for g in data["downtime"]] == ["stopped (signal SIGTERM)", "crashed"]

    env = {k: v for k, v in h.env.items() if k != "NO_COLOR"}
    with Terminal([sys.executable, "-m", "sloth_daemon", "timeline", "--since", "6h"], env, h.home,
                  cols=80, rows=40) as term:
        assert term.wait() == 0
        screen = term.screen()
    assert "\x1b[31m✗\x1b[0m" in term.text and "\\x1b" not in term.text  # colour on a terminal, none escaped
    rows = {ln.split(" ", 1)[0]: ln for ln in screen if ln[:1].isalpha()}
    assert re.search(r"slept (1h59m|2h)", rows["machine"]), screen
    assert "✗" in rows["default"] and "█" in rows["backup"], screen
    assert max(len(ln.rstrip()) for ln in screen) <= 80, "\n".join(map(repr, screen))
    assert any(re.search(r"the daemon was down: crashed", ln) for ln in screen), screen

    with Terminal([sys.executable, "-m", "sloth_daemon", "timeline", "--since", "6h", "--jobs"],
                  {**env, "NO_COLOR": "1"}, h.home, cols=100, rows=40) as term:
        assert term.wait() == 0
    assert "\x1b[" not in term.text and f"#{ids['bad']} sh -c 'exit 3'" in term.text
    assert f"#{ids['hostile']} sh -c 'echo" in term.text  # the hostile command's row, its label cut to fit


def test_the_page_in_a_real_browser_a_bar_per_run_the_sleep_labelled_nothing_injected(night, tmp_path):
    h, data, ids = night
    browser = chromium()
    page = tmp_path / "night.html"
    said = h.cli("timeline", "--since", "6h", "--html", str(page), check=True).stdout
    assert f"wrote {page}" in said and oct(page.stat().st_mode & 0o777) == "0o600"
    source = page.read_text()
    assert "http://" not in source.replace("http://www.w3.org/2000/svg", "") and "https://" not in source

    dom = browse(tmp_path, page, "--dump-dom", "--virtual-time-budget=3000").stdout
    assert 'data-errors="0"' in dom, dom[:2000]  # the page's own collector heard no script error
    assert re.search(r'<body[^>]*data-rendered="\d+"', dom), "the chart was not drawn"
    runs = sum(len(j["runs"]) for j in data["jobs"])
    assert len(re.findall(r'<rect class="run run-', dom)) == runs
    sleep = re.search(r'<g class="gap sleep"[^>]*>(.*?)</g>', dom)
    assert sleep and re.search(r"<rect [^>]*width=\"(\d{2,}|[3-9])", sleep.group(1)), "the sleep gap is not drawn"
    assert re.search(r"slept (1h59m|2h)", sleep.group(1))
    assert dom.count('<g class="gap down"') == 2 and "daemon down" in dom
    by_job = tmp_path / "jobs.html"
    h.cli("timeline", "--since", "6h", "--jobs", "--html", str(by_job), check=True)
    dom = browse(tmp_path, by_job, "--dump-dom", "--virtual-time-budget=3000", fragment=f"job={ids['hostile']}").stdout
    assert 'data-errors="0"' in dom, dom[:2000]
    detail = re.search(r'<section id="detail" data-job="(\d+)">(.*?)</section>', dom, re.S)
    assert detail and detail.group(1) == str(ids["hostile"]), "the job's detail did not open"
    # its command (the row's label, the detail's title) and its log: text on the page, never markup, never run
    assert "&lt;/script&gt;&lt;img src=x onerror=" in detail.group(2)  # the log tail, as text
    assert "<img" not in dom and "<title>sloth timeline</title>" in dom
    assert re.search(r"<td>failed</td><td>attempt 1</td><td>exit 4", detail.group(2))  # its history

    # a person's mouse, through the DevTools protocol: hover names the job and its times, a click opens
    # its history and log, "1 hour" zooms; the browser itself heard no console error or exception
    with Browser(tmp_path) as b:
        b.open(page.as_uri())
        bar = b.eval("(() => { const r = document.querySelector('rect.run-failed[data-job=\"%d\"]')"
                     ".getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()" % ids["bad"])
        # runs of a few ms are 2 px wide: the one on top at that point is the one the pointer names
        under = int(b.eval("document.elementFromPoint(%f, %f).getAttribute('data-job')" % tuple(bar)))
        b.call("Input.dispatchMouseEvent", type="mouseMoved", x=bar[0], y=bar[1])
        tip = b.eval("document.getElementById('tip').hidden ? '' : document.getElementById('tip').textContent")
        job = next(j for j in data["jobs"] if j["id"] == under)
        assert tip.startswith(f"#{under} sh -c ") and "\nattempt 1: " in tip, tip
        said = job['runs'][0]['message']  # the page cuts a message at 80 characters (page.py: cut)
        said = said if len(said) <= 80 else said[:79] + "\u2026"
        assert f"{job['runs'][0]['outcome']}: {said}" in tip, tip
        assert re.search(r"\d\d:\d\d:\d\d → .*\d\d:\d\d:\d\d \(", tip), tip  # its start and end
        for kind in ("mousePressed", "mouseReleased"):
            b.call("Input.dispatchMouseEvent", type=kind, x=bar[0], y=bar[1], button="left", clickCount=1)
        shown = b.eval("document.getElementById('detail').textContent")
        assert shown.startswith(f"#{under} sh -c ") and "history" in shown and "claimed" in shown, shown
        assert job["events"][-1]["message"] in shown, shown
        whole = b.eval("document.getElementById('range').textContent")
        b.eval("document.getElementById('hour').click()")
        hour = b.eval("document.getElementById('range').textContent")
        assert hour != whole and b.eval("document.querySelector('svg').getAttribute('width') > 0")
        t0, t1 = b.eval("[...document.querySelectorAll('.ruler text')].map(t => t.textContent)")[:2]
        assert t0 != t1  # the ruler redrawn, at finer steps
        assert b.errors == [] and b.eval("document.documentElement.getAttribute('data-errors')") == "0"

    shot = tmp_path / "night.png"
    browse(tmp_path, page, f"--screenshot={shot}", "--window-size=1280,720", "--virtual-time-budget=3000")
    assert shot.stat().st_size > 10_000
    print(f"\nthe timeline's screenshot: {shot}")
    wanted = os.environ.get("SLOTH_TIMELINE_PNG")  # docs/timeline.png is made this way
    if wanted:
        shutil.copyfile(shot, wanted)
    assert browser


def test_without_a_daemon_the_queue_is_read_and_bad_input_changes_nothing(night, tmp_path):
    h, data, ids = night
    assert h.stop() == 0
    offline = h.cli("timeline", "--since", "6h", "--json", check=True)
    assert "no daemon is running; reading the queue file (read-only)" in offline.stderr
    read = json.loads(offline.stdout)
    assert [len(j["runs"]) for j in read["jobs"]] == [len(j["runs"]) for j in data["jobs"]]
    last = read["downtime"][-1]  # the daemon stopped: down from then until now, and still
    assert last["why"] == "stopped (signal SIGTERM)" and last.get("open") is True
    h.env["COLUMNS"] = "200"  # the gap's line whole, however long its duration and host name are written
    drawn = h.cli("timeline", "--since", "6h", check=True).stdout
    assert "the daemon was down: stopped (signal SIGTERM) (" in drawn and ", still" in drawn
    db = next(h.home.rglob("queue.db"))
    before = db.read_bytes()
    for args, said in ((["--since", "banana"], "bad --since"), (["--since", "0"], "bad --since"),
                       (["--since", "100d"], "at most 90 days"),
                       (["--html", str(tmp_path / "nowhere" / "x.html")], "no folder")):
        p = h.cli("timeline", *args)
        assert p.returncode != 0 and said in p.stderr and "Traceback" not in p.stderr, (args, p.stderr)
    assert not (tmp_path / "nowhere").exists()
    assert db.read_bytes() == before  # read, never written


@pytest.mark.postgres
def test_on_a_shared_postgresql_queue_each_host_keeps_its_own_rows_on_the_servers_clock(make_harness, pg_url,
                                                                                         fakeclock):
    from tests.support.harness import TEST_CONFIG

    h = make_harness(TEST_CONFIG + f'queue_url = "{pg_url}"\n')
    h.daemon_env.update(fakeclock.env())
    h.start()
    h.wait_state(h.add("sh", "-c", "exit 3", max_attempts=1), "failed")
    fakeclock.jump(HOUR)
    h.wait_for(lambda: [m for m in h.call("timeline")["machine"] if m["kind"] == "sleep"], what="the sleep recorded")
    assert h.stop() == 0
    h.start()
    h.kill9()
    h.start()
    data = h.call("timeline", since_s=2 * HOUR)
    host = h.call("status")["host"]
    assert {m["host"] for m in data["machine"]} == {host}
    assert [m["detail"] for m in data["machine"] if m["kind"] == "up"] == ["stopped: signal SIGTERM", "crashed",
                                                                          "running"]
    sleep = next(m for m in data["machine"] if m["kind"] == "sleep")
    assert HOUR - 5 < sleep["end_at"] - sleep["start_at"] < HOUR + 5
    # the server's clock, not the daemon's (an hour ahead here): the sleep ended about now
    assert abs(sleep["end_at"] - data["until"]) < 120
    assert [j["runs"][0]["outcome"] for j in data["jobs"]] == ["failed"]


def test_the_page_is_never_written_in_the_place_of_a_fifo_a_device_or_a_link(make_harness, tmp_path):
    """`--html /dev/full` renamed a page over the device (as root: the
    machine's /dev/full became an HTML file); a FIFO or a link was replaced
    the same way. Only a regular file (or nothing) is replaced."""
    h = make_harness()
    h.cli("add", "true", check=True)  # the queue exists; no daemon: read read-only
    fifo, link, target = tmp_path / "fifo", tmp_path / "link.html", tmp_path / "target.html"
    os.mkfifo(fifo)
    link.symlink_to(target)
    for path, said in ((fifo, "is a FIFO"), (link, "is a symbolic link")):
        p = h.cli("timeline", "--html", str(path))
        assert p.returncode != 0 and said in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and link.is_symlink() and not target.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "link.html"]
    page = tmp_path / "page.html"
    assert h.cli("timeline", "--html", str(page)).returncode == 0 and page.read_text().startswith("<!DOCTYPE html>")


def test_a_lane_that_does_not_exist_is_said_not_drawn_empty(make_harness):
    """`--lane nightyl` (a typo) drew an empty day, as if nothing had run;
    `ls --lane` says there is no such lane, and so does the timeline."""
    h = make_harness()
    h.cli("add", "true", check=True)
    p = h.cli("timeline", "--lane", "nightyl")
    assert p.returncode == 4 and "no lane named 'nightyl'" in p.stderr and "Lanes: default" in p.stderr, p.stderr
    assert h.cli("timeline", "--lane", "default").returncode == 0
