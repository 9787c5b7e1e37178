#!/usr/bin/env python3
"""docs/top.png: `sloth top` as the real app draws it, over a real daemon
with a small scripted day (running jobs printing progress, a paused lane,
jobs waiting for different reasons, failures of two signatures, schedules).

    .venv/bin/python tests/support/top_picture.py [--out docs/top.png] [--svg FILE]

Textual saves the screen as SVG; headless Chromium (Debian's `chromium`)
turns it into the PNG. Run it again after a change to the view.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.harness import TEST_CONFIG, temp_harness  # noqa: E402

COLS, ROWS = 130, 38
WORK = """#!/bin/sh
for i in $(seq 1 400); do
  awk -v i=$i 'BEGIN { printf "SLOTH_PROGRESS %.3f\\n", i / 400 }'
  echo "$1 $i of 400 done"
  sleep 0.5
done
"""


def scene(h) -> int:
    """The day: returns the job to select."""
    for name in ("encode.sh", "train.sh"):
        (h.home / name).write_text(WORK)
        (h.home / name).chmod(0o755)
    h.call("lane_set", lane="video", concurrency=1, create=True)
    h.call("lane_set", lane="backup", concurrency=1, create=True)
    for i, code in enumerate((1, 1, 1, 137)):
        msg = f"rsync: write failed on /mnt/usb/photos/IMG_{4410 + i}.jpg: No space left on device (28)" \
            if code == 1 else "Killed"
        jid = h.add("sh", "-c", f"echo '{msg}'; exit {code}", max_attempts=1, label="nightly")
        h.wait_state(jid, "failed")
    encode = h.add("./encode.sh", "frame", lane="video", label="encode")
    train = h.add("./train.sh", "epoch", label="train")
    h.wait_state(encode, "running")
    h.wait_state(train, "running")
    h.add("ffmpeg", "-i", "talk.mkv", "talk.mp4", lane="video")
    h.add("make", "report", after=[train])
    h.add("./fetch-mail.sh", not_before=time.time() + 1500)
    h.call("pause", lane="backup")
    h.add("restic", "backup", "/home", lane="backup")
    held = h.add("python", "migrate.py", "--all", lane="backup")  # a paused lane: no claim races the hold
    h.call("hold", ids=[held])
    for name, every in (("photos", "6h"), ("mail", "15m")):
        h.cli("schedule", "add", name, "--every", every, "--", "true", check=True)
    h.cli("schedule", "add", "nightly-backup", "--cron", "30 3 * * *", "--", "restic", "backup", check=True)
    return train


async def shoot(svg: Path, select: int) -> None:
    from sloth_daemon.cli.top.app import TopApp

    app = TopApp()
    async with app.run_test(size=(COLS, ROWS)) as pilot:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (app.snap is None or len(app.snap.running) < 2
                                               or not app.snap.failures):
            await pilot.pause(0.2)
        await pilot.pause(6)  # some progress, some log
        table = app.home.query_one("#running")
        table.move_cursor(row=table.get_row_index(str(select)))
        await pilot.pause(2.5)
        app.save_screenshot(str(svg.name), path=str(svg.parent))


def to_png(svg: Path, png: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("no chromium: apt-get install -y chromium")
    with tempfile.TemporaryDirectory(prefix="chr-") as profile:
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync",
                        f"--user-data-dir={profile}", "--hide-scrollbars", "--window-size=1560,1010",
                        f"--screenshot={png}", svg.resolve().as_uri()],
                       check=True, capture_output=True, timeout=120)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("docs/top.png"))
    ap.add_argument("--svg", type=Path, default=None)
    args = ap.parse_args()
    with temp_harness(TEST_CONFIG, prefix="slpic-") as h:
        h.start()
        select = scene(h)
        os.environ.update({k: v for k, v in h.env.items() if k.startswith("SLOTH_")})
        svg = args.svg or h.home / "top.svg"
        asyncio.run(shoot(svg, select))
        to_png(svg, args.out)
    print(args.out)


if __name__ == "__main__":
    main()
