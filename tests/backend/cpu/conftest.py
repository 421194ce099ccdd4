"""Fixtures of the host-memory tests (test_host_cache, test_workspace)."""

import pytest

import xgrad
from xgrad._backend import workspace


@pytest.fixture
def fresh_workspace():
    """The default workspace limit and no kept blocks, before and after."""
    previous = xgrad.set_workspace_limit(workspace.DEFAULT_LIMIT)
    xgrad.release_workspace()
    yield
    xgrad.set_workspace_limit(previous)
    xgrad.release_workspace()
