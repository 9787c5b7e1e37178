"""A short tmp_path for the service tests: systemd-analyze (test_service_render.py)
reads the user's other units too, and their sockets under XDG_RUNTIME_DIR
(in tmp_path: %t/gnupg/S.gpg-agent.browser) must fit a socket path's 108
bytes, which a tmp_path under a pytest-xdist worker (.../popen-gw0/...) does not."""

import shutil
import tempfile
from pathlib import Path

import pytest


@pytest.fixture
def tmp_path():
    d = Path(tempfile.mkdtemp(prefix="slsv-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)
