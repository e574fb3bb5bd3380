"""VllmEngine against TorchEngine on one model: sampling tokens/s, start-up, and the log-prob gap.

What is measured: one RL step's sampling of the default recipe (32 held-out arithmetic prompts x
group 8 = 256 completions of at most 8 tokens at temperature 1, stopping at <eos>), `--repeats`
times per engine with seeds 0, 1, ...; tokens/s = sampled tokens (stop tokens included) / wall
seconds of `generate`, median over repeats. vLLM's start-up (spawn, model build, first weight
load, warm-up generate) is timed apart, and so is the whole construction (which also imports vLLM
in this process for the model check). The log-prob gap is |engine - learner| over every sampled
token of every repeat, the learner's log-probs recomputed by `token_logprobs` on the same ids at
the same temperature (mean and max), and the mean importance ratio exp(learner - engine).

    python benchmarks/vllm_vs_torch.py [--model RUN/warm_start] [--repeats 5] [--json PATH]

Without --model the default recipe's model is built untrained (as `reinforge train` builds it).
vLLM gets a 1 GiB KV cache (the engine.kv_cache_gib default).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from reinforge.config import load_config
from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.learner.logprobs import token_logprobs
from reinforge.tasks.registry import load_tasks


def load_policy(model_dir: str | None):
    cfg = load_config("default")
    tasks = load_tasks(cfg.task, cfg.trainer.seed)
    if model_dir is None:
        from reinforge.run.pipeline import build_policy

        model, tokenizer = build_policy(cfg, tasks)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return model.eval(), tokenizer, tasks


def learner_gaps(model, prompts, generations, temperature: float) -> torch.Tensor:
    """learner - engine log-prob of every sampled token (right-padded batch, one forward)."""
    rows = [p + g.token_ids for p, g in zip(prompts, generations)]
    width = max(map(len, rows))
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    with torch.no_grad():
        lp, _ = token_logprobs(model, ids, mask, temperature=temperature)
    gaps = []
    for i, (p, g) in enumerate(zip(prompts, generations)):
        mine = lp[i, len(p) - 1 : len(p) - 1 + len(g.token_ids)]
        gaps.append(mine - torch.tensor(g.logprobs))
    return torch.cat(gaps)


def measure(engine, model, prompts, params: SamplingParams, repeats: int) -> dict:
    speeds, gaps = [], []
    for seed in range(repeats):
        start = time.perf_counter()
        gens = engine.generate(prompts, params, seed=seed)
        seconds = time.perf_counter() - start
        speeds.append(sum(len(g.token_ids) for g in gens) / seconds)
        gaps.append(learner_gaps(model, prompts, gens, params.temperature))
    gap = torch.cat(gaps)
    return {
        "tokens_per_s": statistics.median(speeds),
        "tokens_per_s_each": [round(s) for s in speeds],
        "gap_mean": gap.abs().mean().item(),
        "gap_max": gap.abs().max().item(),
        "mean_ratio": gap.exp().mean().item(),
        "tokens": gap.numel(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a saved policy directory (e.g. a run's warm_start); default: the untrained default model")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as `reinforge train` (trainer.threads=1)

    model, tokenizer, tasks = load_policy(args.model)
    prompts = [tokenizer(t.prompt).input_ids for t in tasks.eval[:32] for _ in range(8)]
    params = SamplingParams(max_new_tokens=8, temperature=1.0, stop_token_ids=(tokenizer.eos_token_id,))

    results = {"torch": measure(TorchEngine(model, tokenizer.pad_token_id), model, prompts, params, args.repeats)}
    from reinforge.engines.vllm_engine import VllmEngine

    built = time.perf_counter()
    with VllmEngine(model, tokenizer.pad_token_id, threads=1) as engine:  # one thread, as the trainer
        construction = time.perf_counter() - built
        results["vllm"] = measure(engine, model, prompts, params, args.repeats)
        results["vllm"].update(startup_s=engine.startup_s, construction_s=construction)
    print(json.dumps(results, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
