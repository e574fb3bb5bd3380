"""Gateway test fixtures: an openai client factory with timeouts and no retries."""

from __future__ import annotations

import pytest

CLIENT_TIMEOUT_S = 20.0  # no gateway test may hang: every client call gives up after this


@pytest.fixture
def client_for():
    """client_for(base_url, api_key) -> an openai.OpenAI that never retries and times out."""
    import openai

    clients = []

    def make(base_url, api_key, asynchronous=False):
        cls = openai.AsyncOpenAI if asynchronous else openai.OpenAI
        client = cls(base_url=base_url, api_key=api_key, max_retries=0, timeout=CLIENT_TIMEOUT_S)
        clients.append(client)
        return client

    yield make
    for client in clients:
        if isinstance(client, openai.OpenAI):
            client.close()
