"""Fixtures shared by the sandbox tests."""

from __future__ import annotations

import pytest

from reinforge.envs.tools import sandbox_bounds


@pytest.fixture(params=["detected", "budget"])
def mechanism(request, monkeypatch) -> str:
    """The whole-call bound under test: this machine's best one, and the polled budget."""
    if request.param == "budget":
        monkeypatch.setattr(sandbox_bounds, "detect", lambda: (sandbox_bounds.CallBounds, ()))
        monkeypatch.setenv(sandbox_bounds.BUDGET_OPT_IN, "1")  # refused without it (tests/envs/test_sandbox_side_doors.py)
    return request.param
