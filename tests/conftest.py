"""Fixtures for every test that runs the real daemon (acceptance and integration)."""

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.support.harness import TEST_CONFIG, Harness

# The `fakeclock` fixture (an LD_PRELOAD shim that simulates a suspend).
pytest_plugins = ["tests.support.fakeclock"]


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
