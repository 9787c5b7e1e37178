"""A laptop's night for docs/timeline.png: a queue written through the
real Queue API on a fake clock that ends now (a nightly backup, builds
with a failure and its retry, transcodes two at a time that wait their
turn, a sleep of 2 h 40, a crash of the daemon and its restart), with a
log per run, then `sloth timeline --html` (no daemon: the queue read
read-only) and a headless Chromium's screenshot of it.

    .venv/bin/python -m tests.support.timeline_demo docs/timeline.png

A scripted night through the real daemon is tests/acceptance/test_timeline.py;
its runs last milliseconds, too thin to show what the page looks like.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sloth_daemon.backends.sqlite import identity
from sloth_daemon.clock import ManualClock
from sloth_daemon.paths import ensure_dir, resolve
from sloth_daemon.queue import Queue

M = 60.0
HOST = "laptop"


def night(home: Path) -> None:
    """The queue of SLOTH_HOME=home: ten hours ending now."""
    paths = resolve({"SLOTH_HOME": str(home)})
    ensure_dir(paths.data_dir)
    end_at = time.time()
    t0 = end_at - 10 * 60 * M
    clock = ManualClock(t0)
    q = Queue(paths.db, clock, max_attempts=1, lease_s=86400)  # no lease lapses: nobody heartbeats here
    logs = identity.adopt(paths, q.identity, had_jobs=False)
    ensure_dir(logs.jobs_log_dir)

    def at(minutes: float) -> None:
        clock.set(t0 + minutes * M)

    def add(minute: float, cmd: list[str], lane: str = "default", **kw: object) -> int:
        at(minute)
        return q.enqueue(cmd, lane=lane, **kw)

    def start(minute: float, jid: int, lane: str) -> tuple[int, str, int]:
        at(minute)
        job = q.claim("sloth-daemon:laptop:1:demo", lanes=[lane])
        assert job is not None and job.id == jid and job.token, (job, jid)
        return jid, job.token, job.attempts

    def end(minute: float, run: tuple[int, str, int], *, fail: int = 0, lines: int = 3) -> None:
        jid, token, attempt = run
        logs.job_log(jid, attempt).write_text("".join(f"step {i + 1}/{lines} ok\n" for i in range(lines))
                                              + ("error: disk quota exceeded\n" if fail else "done\n"))
        at(minute)
        if fail:
            q.fail(jid, token, message=f"exit {fail}", exit_code=fail)
        else:
            q.complete(jid, token, message="exit 0", exit_code=0)

    up = q.machine_up(HOST)
    backup = add(8, ["restic", "backup", "/home"], "backup")
    b1 = start(10, backup, "backup")
    build = add(28, ["make", "-C", "~/src/app", "test"], "build", max_attempts=2)
    b2 = start(30, build, "build")
    end(48, b2, fail=2)
    end(52, b1, lines=12)
    b3 = start(55, build, "build")  # its retry, due 2 s after the failure (the clock moved on)
    files = [add(60, ["ffmpeg", "-i", f"talk-{i}.mov", f"talk-{i}.mp4"], "transcode") for i in range(6)]
    t1, t2 = start(62, files[0], "transcode"), start(62.5, files[1], "transcode")
    end(76, b3)
    end(95, t1)
    t3 = start(95.2, files[2], "transcode")
    end(99, t2)
    t4 = start(99.2, files[3], "transcode")
    end(123, t3)
    end(129, t4)
    at(130)
    q.machine_seen(up)  # 02:10 after the start the lid closes; the last two files wait out the sleep
    at(290)
    q.machine_slept(HOST, 160 * M, "machine slept 9600s")
    q.machine_seen(up)
    t5, t6 = start(290.5, files[4], "transcode"), start(291, files[5], "transcode")
    end(317, t5)
    end(322, t6)
    report = add(325, ["python", "report.py", "--since", "yesterday"])
    end(330, start(326, report, "default"), fail=1)
    at(350)
    q.machine_seen(up)  # its last stamp: then the daemon dies (kill -9, the OOM killer)
    at(372)
    up = q.machine_up(HOST)  # the next start finds it running still: crashed
    again = q.restart([report]).jobs[0].id
    end(380, start(375, again, "default"))
    check = add(419, ["restic", "check"], "backup")
    end(455, start(420, check, "backup"), lines=8)
    late = add(585, ["make", "-C", "~/src/app", "release"], "build")
    end(596, start(586, late, "build"))
    add(597, ["rsync", "-a", "~/photos", "nas:"], "backup", not_before=end_at + 3600)  # waits still
    at(600)
    q.machine_seen(up)
    q.close()


def main(out: str) -> int:
    browser = shutil.which("chromium")
    if browser is None:
        print("chromium is not installed", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="sloth-demo-") as tmp:
        home = Path(tmp) / "home"
        night(home)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLOTH_")}
        env.update(SLOTH_HOME=str(home), TZ=os.environ.get("TZ", "UTC"))
        page = Path(tmp) / "night.html"
        subprocess.run([sys.executable, "-m", "sloth_daemon", "timeline", "--since", "10h", "--html", str(page)],
                       env=env, check=True)
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync",
                        "--hide-scrollbars", f"--user-data-dir={tmp}/profile", "--window-size=1200,560",
                        f"--screenshot={os.path.abspath(out)}", "--virtual-time-budget=3000", page.as_uri()],
                       check=True, capture_output=True, env=env)
        subprocess.run([sys.executable, "-m", "sloth_daemon", "timeline", "--since", "10h"], env=env, check=True)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "docs/timeline.png"))
