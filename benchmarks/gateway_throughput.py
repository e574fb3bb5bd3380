"""Gateway throughput: agent episodes/s through the gateway vs calling the engine directly.

What is measured: the same work both ways, on the same model in the same process. An episode is
`--calls` model calls of `--new-tokens` sampled tokens each (no stop token, so every call samples
exactly that many), each call's history extended by a fixed tool message ("ok") before the next:

  direct    reinforge's rollout loop (rollout.episodes.rollout_groups) with an env that appends
            that tool message: one batched engine.generate per turn over every live episode
  gateway   the gateway env (reinforge.gateway.env.GatewayEnv.run_groups), as in training: the
            agent below runs in the agent process, one openai.AsyncOpenAI client per episode,
            against the run's gateway on 127.0.0.1, whose batcher groups concurrent requests
            into engine calls (window env.gateway_window_ms), and records the tokens

The two are run in rounds, one rollout of each per round in turn (after one warm-up round), so
slow and fast moments of a noisy machine hit both alike.

How to read it: `episodes/s` is the median over rounds of episodes / wall seconds of a rollout;
`x direct` the median of the per-round ratio gateway / direct (paired, steadier than absolute
numbers on a shared box); `engine calls` per rollout (direct: one per turn, `--calls`);
`batch fill` is the gateway's mean rows per engine call over the episodes in flight (1.0: every
call batched every episode). The gateway adds HTTP, JSON, the chat template's rendering of each
request and the agent process; what it must keep is the batching (fill near 1).

    python benchmarks/gateway_throughput.py [--episodes 64] [--calls 3] [--new-tokens 16] [--rounds 5] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time


async def fixed_calls_agent(task, client, calls: int = 3) -> str:
    """`calls` model calls, each history extended by the reply and a tool message: append-only."""
    model = (await client.models.list()).data[0].id
    messages = [{"role": "user", "content": task.prompt}]
    reply = ""
    for _ in range(calls):
        response = await client.chat.completions.create(model=model, messages=messages)
        reply = response.choices[0].message.content or ""
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": "ok"}]
    return reply


class FixedReplyEnv:
    """The direct side: the same episodes in the rollout loop, the same message between calls."""

    def __init__(self, tokenizer, calls: int):
        from reinforge.envs.chat_format import ChatFormat

        self.tokenizer, self.max_turns = tokenizer, calls
        self.chat = ChatFormat(tokenizer)
        self.stop_token_ids = ()
        self.reply = self.chat.observation_ids([{"role": "user", "content": "ok"}])

    def prompt_ids(self, task):
        return self.chat.prompt_ids([{"role": "user", "content": task.prompt}])

    def decode_response(self, ids):
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def episode(self):
        env = self

        class Episode:
            def reset(self, task):
                return env.prompt_ids(task)

            def step(self, text, finish_reason):
                from reinforge.envs.base import StepResult

                return StepResult(observation_ids=list(env.reply))

        return Episode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--preset", default="micro")
    parser.add_argument("--window-ms", type=float, default=50.0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import torch

    from reinforge.engines.base import SamplingParams
    from reinforge.engines.torch_engine import TorchEngine
    from reinforge.gateway.env import GatewayEnv
    from reinforge.models.tiny_llama import build_tiny_llama
    from reinforge.models.tokenizer import train_tokenizer
    from reinforge.rollout.episodes import rollout_groups
    from reinforge.tasks.task import Task

    torch.set_num_threads(1)
    rng = random.Random(0)
    lines = [f"{rng.randrange(1000)}*{rng.randrange(100)}={rng.randrange(10**5)}" for _ in range(2000)]
    tokenizer = train_tokenizer(lines)
    model = build_tiny_llama(tokenizer, args.preset, max_positions=512, seed=0).eval()
    engine = TorchEngine(model, tokenizer.pad_token_id)
    tasks = [Task(id=f"t{i}", prompt=f"{rng.randrange(100, 1000)}*{rng.randrange(10, 100)}=", answer="0") for i in range(args.episodes)]
    params = SamplingParams(args.new_tokens, 1.0, stop_token_ids=())

    direct_env = FixedReplyEnv(tokenizer, args.calls)
    gateway_env = GatewayEnv(
        tokenizer, f"{__file__}:fixed_calls_agent", {"calls": args.calls}, max_turns=args.calls, agent_timeout_s=600,
        window_ms=args.window_ms, agent_concurrency=args.episodes, max_new_tokens=args.new_tokens,
    )

    def direct(seed: int) -> dict:
        start = time.perf_counter()
        out = rollout_groups(engine, direct_env, tasks, 1, params, seed, max_episode_tokens=512)
        seconds = time.perf_counter() - start
        assert len(out) == args.episodes and all(sum(t.loss_mask) == args.calls * args.new_tokens for t in out)
        return {"seconds": seconds, "engine_calls": args.calls, "fill": 1.0}

    def gateway(seed: int) -> dict:
        before = dict(gateway_env._gateways[id(engine)].stats()) if gateway_env._gateways else {"engine_calls": 0, "rows": 0}
        start = time.perf_counter()
        out = gateway_env.run_groups(engine, tasks, 1, params, seed, 0, 512)
        seconds = time.perf_counter() - start
        after = gateway_env._gateways[id(engine)].stats()
        failed = [t.errors for t in out if t.finish_reason == "agent_error"]
        assert not failed, failed[:1]
        calls = after["engine_calls"] - before.get("engine_calls", 0)
        rows = after["rows"] - before.get("rows", 0)
        return {"seconds": seconds, "engine_calls": calls, "fill": rows / max(calls, 1) / args.episodes,
                "splits": sum(t.stats.get("splits", 0) for t in out)}

    results = {"direct": [], "gateway": []}
    try:
        direct(0), gateway(0)  # warm-up: the agent process and the server start here
        for r in range(1, args.rounds + 1):
            results["direct"].append(direct(r))
            results["gateway"].append(gateway(r))
    finally:
        gateway_env.close()

    rate = {k: [args.episodes / x["seconds"] for x in v] for k, v in results.items()}
    ratio = statistics.median(g / d for g, d in zip(rate["gateway"], rate["direct"]))
    print(f"{args.episodes} episodes x {args.calls} calls x {args.new_tokens} tokens, {args.preset} model, {args.rounds} rounds")
    print(f"{'':10s} {'episodes/s':>11s} {'x direct':>9s} {'engine calls':>13s} {'batch fill':>11s}")
    for name in ("direct", "gateway"):
        calls = statistics.median(x["engine_calls"] for x in results[name])
        fill = statistics.median(x["fill"] for x in results[name])
        shown = 1.0 if name == "direct" else ratio
        print(f"{name:10s} {statistics.median(rate[name]):11.2f} {shown:9.2f} {calls:13.0f} {fill:11.2f}")
    print(f"gateway splits (should be 0: the agent only appends): {sum(x['splits'] for x in results['gateway'])}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results, "ratio": ratio}, f, indent=1)


if __name__ == "__main__":
    main()
