"""The gateway these tests train through (reinforge.gateway's), each one recorded as it starts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def gateways(monkeypatch):
    """Every gateway the run starts, in order (to check that each was closed)."""
    from reinforge.gateway import Gateway
    from reinforge.gateway import env as gateway_env

    started = []

    def build(*args, **kwargs):
        gateway = Gateway(*args, **kwargs)
        started.append(gateway)
        return gateway

    monkeypatch.setattr(gateway_env, "default_gateway", build)
    return started
