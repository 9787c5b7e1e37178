"""Fixtures of the integration tests."""

import pytest

from tests.support.keeper_rig import make_rig, remove_rig


@pytest.fixture
def rig():
    """A real keeper in a temporary home (tests/support/keeper_rig.py), removed after."""
    r = make_rig()
    try:
        yield r
    finally:
        remove_rig(r)
