"""The daemon dormant (``dormant_after_s``, issue 34 item 1): after a window
with nothing to do its process becomes a small holder of its socket and
lock (daemon/dormant.py), and a command, a signal, a schedule's slot or a
write to the queue file brings the daemon back, in the same process.

Real daemon, real keeper, real CLI in a temporary home; a window of 1 s.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sloth_daemon.cli.launcher import lock_holder
from sloth_daemon.paths import resolve
from sloth_daemon.queue import Queue
from tests.support.harness import TEST_CONFIG, Harness, alive

WINDOW = 'dormant_after_s = "1s"\nkeeper_linger_s = "200ms"\nclock_check_s = "200ms"\n'
DORMANT_MAX_KB = 15_000  # the holder is ~9 MB here; the daemon at rest ~22 MB


def dormant_harness(make_harness, extra: str = "") -> Harness:
    h = make_harness(TEST_CONFIG.replace('clock_check_s = "1s"\n', "") + WINDOW + extra, "h")
    h.daemon_env["SLOTH_DORMANT_LEAD_S"] = "2"
    return h


def started(make_harness, extra: str = "", *, dormant: bool = False) -> tuple[Harness, int]:
    """A daemon of the dormant harness started (and gone dormant): it and its pid."""
    h = dormant_harness(make_harness, extra)
    h.start()
    assert h.daemon is not None
    if dormant:
        wait_dormant(h, h.daemon.pid)
    return h, h.daemon.pid


def is_dormant(pid: int) -> bool:
    try:
        return "dormant.py" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def wait_dormant(h: Harness, pid: int, timeout_s: float = 30) -> None:
    h.wait_for(lambda: is_dormant(pid), timeout_s, "the daemon gone dormant")


def woken(h: Harness, why: str, times: int = 1) -> bool:
    return h.log_text().count(f"woken from dormancy (pid {h.daemon.pid}): {why}") >= times  # type: ignore[union-attr]


def test_at_rest_it_goes_dormant_small_in_the_same_process_and_a_command_wakes_it(make_harness):
    h, pid = started(make_harness)
    jid = h.add("sh", "-c", "echo one")
    assert h.wait_state(jid, "done")["attempts"] == 1
    wait_dormant(h, pid)
    time.sleep(0.3)
    assert rss_kb(pid) < DORMANT_MAX_KB, rss_kb(pid)
    paths = resolve({"SLOTH_HOME": str(h.home)})
    assert lock_holder(paths) == str(pid)  # still the one daemon: a second cannot start
    assert h.socket.exists()
    assert "dormant: nothing queued, running or held for 1s (dormant_after_s)" in h.log_text()

    added = h.cli("add", "--wait", "--", "sh", "-c", "echo two", check=True)  # served by the daemon it wakes
    assert "started the daemon" not in added.stderr
    again = h.cli("ls", "--json", check=True)
    assert '"state": "done"' in again.stdout or "done" in again.stdout
    assert h.daemon.poll() is None and not is_dormant(pid)
    assert woken(h, "a connection")
    assert h.call("status")["pid"] == pid
    jobs = h.call("list", limit=10)["jobs"]
    assert sorted(j["state"] for j in jobs) == ["done", "done"] and all(j["attempts"] == 1 for j in jobs)

    wait_dormant(h, pid)  # and again, once the window passed
    st = h.call("status")  # a read wakes it too, and is answered
    assert st["pid"] == pid


def test_a_schedules_slot_wakes_it_in_time_and_runs_on_time(make_harness):
    h, pid = started(make_harness)
    h.cli("schedule", "add", "tick", "--every", "8s", "--", "true", check=True)
    h.wait_for(lambda: queued_at(h), 30, "the first slot's job")
    wait_dormant(h, pid)  # a slot 8 s away, woken 2 s before it (SLOTH_DORMANT_LEAD_S)
    h.wait_for(lambda: len(queued_at(h)) >= 2, 30, "the next slot's job")  # the file read: no connection
    assert woken(h, "the wake time"), h.log_text()[-3000:]
    first, second = queued_at(h)[:2]
    assert 7 < second - first < 8 + 1.5  # queued at its slot, not late
    assert h.daemon.poll() is None


def queued_at(h: Harness) -> list[float]:
    """When each job was added, read from the queue file (a connection would wake the daemon)."""
    with sqlite3.connect(f"file:{h.home / 'queue.db'}?mode=ro", uri=True) as c:
        return [r[0] for r in c.execute("SELECT created_at FROM jobs ORDER BY id")]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_to_the_dormant_process_stops_the_daemon_cleanly(make_harness, sig):
    h, pid = started(make_harness, dormant=True)
    os.kill(pid, sig)
    assert h.daemon.wait(30) == 0, h.log_text()
    assert f"stopping (keeping running jobs): signal {sig.name}" in h.log_text() or sig is signal.SIGINT
    assert woken(h, f"signal {sig.name}")
    assert not h.socket.exists()
    assert lock_holder(resolve({"SLOTH_HOME": str(h.home)})) is None


def test_a_reload_signal_to_the_dormant_process_is_the_woken_daemons_reload(make_harness):
    h, pid = started(make_harness, dormant=True)
    cfg = h.home / "config.toml"
    cfg.write_text(cfg.read_text() + "max_attempts = 7\n")
    os.kill(pid, signal.SIGHUP)
    h.wait_for(lambda: "max_attempts: 3 -> 7" in h.log_text(), 30, "the reload")
    assert woken(h, "signal SIGHUP")
    assert h.daemon.poll() is None
    assert h.call("status")["pid"] == pid


def test_a_job_another_process_writes_into_the_queue_file_wakes_it_and_runs(make_harness):
    h, pid = started(make_harness, dormant=True)
    with Queue(h.home / "queue.db") as q:  # the library, as another program of the user's would
        jid = q.enqueue(["true"])
    h.wait_for(lambda: woken(h, "the queue's files changed"), 30, "woken by the write")
    assert h.wait_state(jid, "done")["attempts"] == 1


def test_kill_9_of_the_dormant_process_loses_nothing_and_the_next_command_starts_a_daemon(make_harness):
    h, pid = started(make_harness)
    jid = h.add("true")
    h.wait_state(jid, "done")
    wait_dormant(h, pid)
    h.kill9()
    assert not alive(pid)
    added = h.cli("add", "--wait", "--", "true", check=True)
    assert added.returncode == 0
    with sqlite3.connect(h.home / "queue.db") as c:
        assert [r[0] for r in c.execute("SELECT state FROM jobs ORDER BY id")] == ["done", "done"]


def test_commands_at_random_moments_around_dormancy_are_all_answered_and_every_job_runs_once(make_harness):
    """Adds at random moments around the window's end (accepting paused,
    the queue closing, the exec of the dormant process, its wake, the
    daemon's start): each is answered, each job runs once, first try."""
    h = dormant_harness(make_harness)
    h.daemon_env["SLOTH_RENEW_GROWTH_KB"] = "1000000000"  # a renewal at each rest restarted the window after
    daemon = h.start()  # the add's job: the sleeps below seldom crossed it (the test failed on a loaded machine)
    rng = random.Random(3436)
    ids: list[int] = []
    for _ in range(10):
        time.sleep(rng.uniform(0.9, 1.8))  # the window is 1 s, its looks 0.25 s apart
        p = h.cli("add", "--", "true", check=True)
        ids.append(int(p.stdout.split()[-1]))
    h.cli("wait", *map(str, ids), check=True, timeout_s=60)
    for jid in ids:
        job = h.job(jid)
        assert job["state"] == "done" and job["attempts"] == 1, job
    assert h.log_text().count("woken from dormancy") >= 2, h.log_text()  # the window was really crossed
    assert daemon.poll() is None and h.call("status")["pid"] == daemon.pid


def test_under_a_real_systemd_user_it_goes_dormant_keeps_its_watchdog_fed_and_stops_cleanly(make_harness, tmp_path):
    """The service's main process goes dormant; with WatchdogSec=2 it lives
    on past several watchdog periods (the holder pings), the next command
    wakes it in the same main pid, and `systemctl --user stop` ends it cleanly."""
    from tests.acceptance.test_socket_activation import main_pid, systemctl, user_manager

    h = dormant_harness(make_harness)
    manager = user_manager(h, tmp_path)
    try:
        dropin = tmp_path / "cfg" / "systemd" / "user" / "sloth.service.d"
        dropin.mkdir(parents=True)
        (dropin / "watchdog.conf").write_text("[Service]\nWatchdogSec=2\nEnvironment=SLOTH_DORMANT_LEAD_S=2\n")
        h.cli("service", "install", "--now", check=True)
        h.cli("add", "--wait", "--", "true", check=True)
        pid = main_pid(h)
        assert pid > 0
        wait_dormant(h, pid)
        time.sleep(6)  # three watchdog periods, dormant
        assert main_pid(h) == pid and is_dormant(pid), systemctl(h, "status", "sloth.service").stdout
        assert systemctl(h, "show", "-p", "NRestarts", "--value", "sloth.service").stdout.strip() == "0"
        h.cli("add", "--wait", "--", "true", check=True)  # woken, served
        assert main_pid(h) == pid and not is_dormant(pid)
        wait_dormant(h, pid)
        assert systemctl(h, "stop", "sloth.service").returncode == 0
        assert systemctl(h, "show", "-p", "Result", "--value", "sloth.service").stdout.strip() == "success"
        assert not alive(pid)
    finally:
        h.cli("service", "uninstall")
        manager.terminate()
        manager.wait(30)


def test_with_the_idle_exit_on_it_goes_dormant_first_then_exits_when_the_exit_comes_due(make_harness):
    """dormant_after_s 1 s, idle_exit_s 4 s: dormant after a second, then
    woken when the idle exit comes due, and that daemon leaves cleanly at
    its first look (its socket removed, its lock free)."""
    h, pid = started(make_harness, 'idle_exit_s = "4s"\n', dormant=True)
    assert h.daemon.wait(30) == 0, h.log_text()
    log = h.log_text()
    assert woken(h, "the wake time") and "idle exit: nothing queued, running, held or scheduled for 4s" in log
    assert not h.socket.exists()
    assert lock_holder(resolve({"SLOTH_HOME": str(h.home)})) is None


def test_a_config_too_long_to_hand_over_keeps_the_daemon_whole_not_broken_by_an_edit(make_harness):
    """config.toml longer than the handover carries (renewal.HANDED_TEXT_MAX)
    would be read from the file at the wake, hours later: an edit made
    meanwhile and never reloaded, a broken one, ended the woken daemon at its
    start (the client's command: "closed the connection before answering")."""
    h, pid = started(make_harness, "# " + "x" * 70_000 + "\n")
    h.wait_for(lambda: "dormancy called off" in h.log_text(), 30, "dormancy refused")
    assert "too long to hand over" in h.log_text()
    assert not is_dormant(pid)
    cfg = h.home / "config.toml"
    cfg.write_text(cfg.read_text() + "this is not toml ===\n")
    assert h.call("status")["pid"] == pid
    assert h.daemon.poll() is None


class HeldLog:
    """The daemon's stderr through a pipe this test can fill: the daemon
    then stops at its next log line, wherever that is, until ``let_go``."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe()
        os.set_blocking(self.r, False)
        self.text = b""
        self.holding = False

    def read(self) -> str:
        if not self.holding:
            with contextlib.suppress(BlockingIOError):
                while chunk := os.read(self.r, 65536):
                    self.text += chunk
        return self.text.decode(errors="replace")

    def hold(self) -> None:
        self.read()
        self.holding = True
        fill = os.open(f"/proc/self/fd/{self.w}", os.O_WRONLY | os.O_NONBLOCK)  # its own description: the
        try:  # daemon's stays blocking
            with contextlib.suppress(BlockingIOError):
                while True:
                    os.write(fill, b"\0" * 4096)
        finally:
            os.close(fill)

    def let_go(self) -> None:
        self.holding = False
        self.read()


def test_a_job_another_process_queues_between_the_last_look_and_the_dormant_process_is_not_left_waiting(
        make_harness):
    """A library's enqueue committed after the daemon's last look but before
    the dormant process took the queue files' stamps was in those stamps:
    nothing woke the daemon for it (only the next command or slot did). The
    daemon is held at its "stopping ... dormant" log line (after the last
    look) while the job is queued."""
    h = dormant_harness(make_harness)
    held = HeldLog()
    env = dict(h.daemon_env, SLOTH_RENEW_GROWTH_KB="1000000000")  # no renewal: the next line is the dormancy's
    h.daemon = subprocess.Popen([sys.executable, "-m", "sloth_daemon", "daemon", "run"], env=env,
                                stdout=held.w, stderr=held.w, stdin=subprocess.DEVNULL, start_new_session=True,
                                cwd=str(h.home))
    h.spawned.append(h.daemon)
    pid = h.daemon.pid
    h.wait_for(lambda: "letting it go" in held.read(), 30, "the keeper let go")
    held.hold()
    h.wait_for(lambda: "pipe_write" in Path(f"/proc/{pid}/wchan").read_text(), 30, "the daemon held at a log line")
    with Queue(h.home / "queue.db") as q:
        jid = q.enqueue(["true"])
    held.let_go()
    h.wait_for(lambda: "dormant: nothing queued" in held.read(), 30, "the dormancy's log line")
    h.wait_for(lambda: "ready" in held.read().rsplit("dormant: nothing queued", 1)[1] or None, 30,
               "the daemon back for the job, in the text: " + held.read()[-2000:])
    with sqlite3.connect(f"file:{h.home / 'queue.db'}?mode=ro", uri=True) as c:
        h.wait_for(lambda: c.execute("SELECT state FROM jobs WHERE id = ?", (jid,)).fetchone()[0] == "done", 30,
                   "the job done")
    assert "dormancy called off at the last look (renewing instead): 1 queued" in held.read()
    os.close(held.w)


def jobs_in(h: Harness) -> int:
    with sqlite3.connect(f"file:{h.home / 'queue.db'}?mode=ro", uri=True) as c:
        return int(c.execute("SELECT count(*) FROM jobs").fetchone()[0])


def test_a_clock_put_right_while_dormant_brings_the_schedules_back_to_it(make_harness, fakeclock):
    """The clock set a year ahead (the daemon fires and moves its slots
    there), then put right while it is dormant: a daemon running brings the
    schedules back to the clock (Scheduler.clock_jumped); the dormant process
    slept on to the wrong date, the schedules silent a year."""
    h = dormant_harness(make_harness)
    h.daemon_env.update(fakeclock.env())
    h.start()
    assert h.daemon is not None
    pid = h.daemon.pid
    h.cli("schedule", "add", "tick", "--every", "8s", "--", "true", check=True)
    h.wait_for(lambda: jobs_in(h) >= 1, 30, "the first slot's job")
    fakeclock.jump(365 * 86400)
    h.wait_for(lambda: jobs_in(h) >= 2, 30, "the year ahead's catch-up job")
    wait_dormant(h, pid)
    n = jobs_in(h)
    fakeclock.jump(-365 * 86400)
    h.wait_for(lambda: jobs_in(h) > n, 30, "a slot's job on the clock put right")
    assert woken(h, "the wall clock was set back"), h.log_text()


def test_a_change_of_the_local_zone_while_dormant_moves_the_local_time_schedules(make_harness, tmp_path):
    """UTC to Tokyo while dormant (the zone file the daemon reads,
    $SLOTH_LOCALTIME): a daemon running moves "0 3 * * *" to 03:00 in Tokyo
    at its next clock check (Scheduler.zone_check); dormant, nothing woke
    it, and the daemon woken later took the new zone as the one it had
    always had: the slot stayed at 03:00 UTC."""
    import shutil

    from tests.acceptance.test_schedule_truth import _next_local

    zone = tmp_path / "localtime"
    shutil.copyfile("/usr/share/zoneinfo/UTC", zone)
    h = dormant_harness(make_harness)
    h.daemon_env.pop("TZ", None)
    h.daemon_env["SLOTH_LOCALTIME"] = str(zone)
    h.start()
    assert h.daemon is not None
    pid = h.daemon.pid
    h.cli("schedule", "add", "night", "--cron", "0 3 * * *", "--", "true", check=True)
    wait_dormant(h, pid)
    shutil.copyfile("/usr/share/zoneinfo/Asia/Tokyo", tmp_path / "new")
    os.replace(tmp_path / "new", zone)
    h.wait_for(lambda: woken(h, "the local time zone changed"), 30, "woken by the zone's change")
    night = h.cli_json("schedule", "show", "night", "--json")["schedule"]
    assert night["next_slot"] == _next_local("Asia/Tokyo", 3, time.time()), night


def test_a_sleep_of_the_machine_while_dormant_is_in_the_timeline(make_harness, fakeclock):
    """A daemon running records each sleep of the machine (machine_log.py,
    its clock watch); dormant, the daemon woken after knew nothing of the
    clocks before it: the sleep was in no timeline (nor in `status`)."""
    h = dormant_harness(make_harness)
    h.daemon_env.update(fakeclock.env())
    h.start()
    assert h.daemon is not None
    wait_dormant(h, h.daemon.pid)
    fakeclock.jump(2 * 3600)  # the laptop slept two hours
    h.wait_for(lambda: woken(h, "the machine slept"), 30, "woken by the resume")
    sleeps = h.wait_for(lambda: [m for m in h.call("timeline", since_s=6 * 3600)["machine"] if m["kind"] == "sleep"],
                        30, "the sleep recorded")
    assert len(sleeps) == 1, sleeps
