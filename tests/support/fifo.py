"""A FIFO where a file should be: open() of one waits for a writer for
ever. ``not_stuck_on`` runs what may open it on a thread and fails the test
if it is still waiting after a while, freeing the thread first (a writer
opens the FIFO), so a stuck reader never outlives the test."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable

import pytest


def make_fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def not_stuck_on(fifo: Path, work: Callable[[], object], timeout_s: float = 10.0) -> None:
    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        with open(fifo, "wb"):  # free the stuck thread
            pass
        pytest.fail(f"stuck opening the FIFO {fifo.name}")
