"""The example agent is plain openai-client code: it runs against any OpenAI-compatible endpoint,
here the gateway serving a fixed model outside training (nothing recorded)."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import openai

from reinforge.engines.torch_engine import TorchEngine
from reinforge.gateway import Gateway
from reinforge.tasks.arithmetic import make_product_task

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gateway_agent" / "agent.py"


def load_example():
    spec = importlib.util.spec_from_file_location("gateway_example_agent", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_example_agent_runs_against_a_plain_endpoint(tokenizer, nano_model):
    agent = load_example()
    task = make_product_task(123, 45, with_tool=False)

    async def run(base_url: str, key: str) -> str:
        client = openai.AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=60)
        try:
            return await agent.solve(task, client)
        finally:
            await client.close()

    with Gateway(TorchEngine(nano_model, tokenizer.pad_token_id), tokenizer, max_new_tokens=8) as gateway:
        answer = asyncio.run(run(gateway.base_url, gateway.api_key))
        assert gateway.stats()["engine_calls"] >= 1
    assert isinstance(answer, str)


def test_the_example_calculator_is_arithmetic_only():
    calculate = load_example().calculate
    assert calculate("123*45") == "5535" and calculate("(7+5)/4") == "3" and calculate("-2**3") == "-8"
    for bad in ("__import__('os').system('true')", "2**100000", "x+1", "1/0", "[1]*3"):
        try:
            calculate(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} was evaluated")
