"""Rollout throughput: sampled tokens/s of reinforge's TorchEngine vs `transformers` `generate`.

What is measured: one batch of 64 left-padded prompts of varied lengths, 64 new tokens each
(no stop tokens, so every row samples exactly 64 tokens: 4096 tokens per call), plain sampling
at temperature 1.0 (no top-k / top-p), float32 weights unless stated. Variants, all on the same
model in the same process:

  ours fused fp32   TorchEngine (fused Llama decoder, preallocated KV cache, decode attention in
                    C on one thread: engine.decode_attention auto), the default
  ours fused torch  the same with engine.decode_kernels=torch (torch's ops, no C kernels)
  ours fused bf16   the same with engine_dtype=bfloat16
  ours HF fp32      TorchEngine(..., fused=False): the model's own forward + cache, one call per token
  generate fp32     model.generate(do_sample=True, temperature=1.0, top_k=0, min/max_new_tokens=64)

Each variant is warmed up once, then the variants run in rounds (one call of each per round,
in turn), so slow and fast moments of a noisy machine hit every variant alike.

How to read it: `tok/s` is the median over rounds of sampled tokens / wall-clock seconds of
one call (prefill included); `s/call` is the matching wall time and `cpu s/call` the process CPU
time of a call (when it is well below s/call, other processes took the cores). `x generate` is
the median over rounds of (variant tok/s / generate tok/s in the same round): a paired ratio,
steadier than absolute numbers, which can move 2-3x between runs on a shared 2-core box. The
target is ours fused fp32 >= 2x generate.

Threads default to 1: these models are small enough that a decode step is dominated by per-op
overhead, and a second intra-op thread spin-waits (badly, when other processes share the cores).
Pass `--threads 2` (or 0 for torch's choice) on an idle machine or for larger `--model`s.

    python benchmarks/rollout_throughput.py [--preset micro] [--model DIR] [--threads N] [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import json
import random
import statistics
import time

import torch

from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.models.loading import load_model_and_tokenizer
from reinforge.models.tiny_llama import build_tiny_llama
from reinforge.models.tokenizer import train_tokenizer


def arithmetic_lines(n: int, rng: random.Random) -> list[str]:
    lines = []
    for _ in range(n):
        a, b = rng.randrange(1000), rng.randrange(1000)
        lines.append(f"{a}+{b}={a + b}")
    return lines


def make_prompt_texts(n: int, seed: int = 0) -> list[str]:
    """Prompts of 1 to 4 arithmetic problems, the last one unanswered: lengths vary ~4x."""
    rng = random.Random(seed)
    texts = []
    for row in range(n):
        solved = arithmetic_lines(row % 4, rng)
        a, b = rng.randrange(1000), rng.randrange(1000)
        texts.append(" ".join(solved + [f"{a}+{b}="]))
    return texts


def build(args) -> tuple[torch.nn.Module, object, list[list[int]]]:
    texts = make_prompt_texts(args.batch)
    if args.model:
        model, tokenizer = load_model_and_tokenizer(args.model)
        prompts = [tokenizer(t).input_ids for t in texts]
    else:
        tokenizer = train_tokenizer(arithmetic_lines(2000, random.Random(1)))
        prompts = [tokenizer(t).input_ids for t in texts]
        positions = max(128, max(len(p) for p in prompts) + args.new_tokens)
        model = build_tiny_llama(tokenizer, args.preset, max_positions=positions, seed=0)
    return model.eval(), tokenizer, prompts


def left_pad(prompts: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, p in enumerate(prompts):
        ids[row, width - len(p) :] = torch.tensor(p)
        mask[row, width - len(p) :] = 1
    return ids, mask


def make_variants(model, pad: int, prompts: list[list[int]], new_tokens: int) -> dict:
    """name -> callable(seed) returning the number of tokens it sampled."""
    params = SamplingParams(max_new_tokens=new_tokens, temperature=1.0)
    engines = {
        "ours fused fp32": TorchEngine(model, pad),
        "ours fused torch": TorchEngine(model, pad, decode_kernels="torch"),
        "ours fused bf16": TorchEngine(model, pad, dtype="bfloat16"),
        "ours HF fp32": TorchEngine(model, pad, fused=False),
    }
    ids, mask = left_pad(prompts, pad)

    def run_engine(engine):
        return lambda seed: sum(len(g.token_ids) for g in engine.generate(prompts, params, seed=seed))

    def run_generate(seed):
        torch.manual_seed(seed)
        out = model.generate(
            input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
            max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=pad,
        )
        return (out.shape[1] - ids.shape[1]) * out.shape[0]

    return {**{name: run_engine(e) for name, e in engines.items()}, "generate fp32": run_generate}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="micro", help="tiny Llama preset (ignored with --model)")
    parser.add_argument("--model", default=None, help="a local Hugging Face model directory")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (0: torch's choice)")
    parser.add_argument("--rounds", type=int, default=3, help="timed calls of each variant, interleaved")
    parser.add_argument("--batch", type=int, default=64, help="prompts per call")
    parser.add_argument("--new-tokens", type=int, default=64, help="sampled tokens per prompt")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    model, tokenizer, prompts = build(args)
    variants = make_variants(model, tokenizer.pad_token_id, prompts, args.new_tokens)
    expected = args.batch * args.new_tokens
    for name, run in variants.items():  # warm-up, and check that every row really ran to the end
        sampled = run(10_000)
        if sampled != expected:
            raise RuntimeError(f"{name} sampled {sampled} tokens, expected {expected}")

    rates: dict[str, list[float]] = {name: [] for name in variants}
    cpu_seconds: dict[str, list[float]] = {name: [] for name in variants}
    for round_ in range(args.rounds):
        for name, run in variants.items():
            start, cpu_start = time.perf_counter(), time.process_time()
            sampled = run(round_)
            rates[name].append(sampled / (time.perf_counter() - start))
            cpu_seconds[name].append(time.process_time() - cpu_start)

    base = rates["generate fp32"]
    results = {
        name: {
            "tokens_per_s": statistics.median(r),
            "seconds": expected / statistics.median(r),
            "x_generate": statistics.median(a / b for a, b in zip(r, base)),
            "cpu_seconds": statistics.median(cpu_seconds[name]),
            "all_tokens_per_s": r,
        }
        for name, r in rates.items()
    }
    n_params = sum(p.numel() for p in model.parameters())
    lengths = [len(p) for p in prompts]
    print(
        f"model: {args.model or 'preset ' + args.preset} ({n_params / 1e6:.2f}M params), "
        f"{args.batch} prompts ({min(lengths)}-{max(lengths)} tokens) x {args.new_tokens} new tokens, "
        f"threads={torch.get_num_threads()} (cpus: {os.cpu_count()}), rounds={args.rounds}"
    )
    print(f"{'variant':<18}{'s/call':>9}{'cpu s/call':>12}{'tok/s':>10}{'x generate':>12}")
    for name, r in results.items():
        print(f"{name:<18}{r['seconds']:>9.3f}{r['cpu_seconds']:>12.3f}{r['tokens_per_s']:>10.0f}{r['x_generate']:>11.2f}x")
    target = results["ours fused fp32"]["x_generate"]
    print(f"target ours fused fp32 >= 2x generate: {'met' if target >= 2 else 'NOT met'} ({target:.2f}x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "threads": torch.get_num_threads(), "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
