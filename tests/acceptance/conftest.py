import shutil
import tempfile
from pathlib import Path

import pytest

from tests.support.harness import Harness

# Short leases and a 1 s clock check keep the real-daemon tests quick; the
# durations are still real (no clock is faked here except where a test says).
TEST_CONFIG = """
lease_s = "3s"
clock_check_s = "1s"
kill_grace_s = "2s"
backoff_cap_s = "60s"
"""


@pytest.fixture
def home():
    # Unix socket paths are limited to ~107 bytes: keep the folder short.
    d = Path(tempfile.mkdtemp(prefix="sl-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def harness(home):
    h = Harness(home / "h", config=TEST_CONFIG)
    try:
        yield h
    finally:
        h.reap()
