"""The gateway these tests train through: reinforge.gateway's when it is there, else the small
stand-in of fake_gateway.py (the same interface), so the trainer side is tested either way."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


def real_gateway_available() -> bool:
    try:
        from reinforge.gateway import Gateway  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture
def gateways(monkeypatch):
    """Every gateway the run starts, in order (to check that each was closed)."""
    from reinforge.gateway import env as gateway_env

    started = []
    if real_gateway_available():
        from reinforge.gateway import Gateway as factory
    else:
        from fake_gateway import FakeGateway as factory

    def build(*args, **kwargs):
        gateway = factory(*args, **kwargs)
        started.append(gateway)
        return gateway

    monkeypatch.setattr(gateway_env, "default_gateway", build)
    return started
