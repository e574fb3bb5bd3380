"""The decode step's matmuls: torch's GEMM against the panel GEMM (reinforge.kernels.decode_gemm).

Per matrix of SmolLM2-135M's shapes, 32 rows (8 prompts x 4), one thread, CPU time, the cache
flushed before each call (at a decode step every weight comes from memory): GFLOP/s, best of
`--rounds`. With `--model DIR`: whole rollouts of that model (8 chat prompts of the default
recipe x 4 rows x 128 forced tokens, as benchmarks/vs_trl.py samples them), torch's GEMM and the
panels alternating, order swapped each round, the decoder's build included; CPU-s per rollout,
how many of the 32 rows sampled the same tokens, and the machine's load.

    python benchmarks/decode_gemm.py [--rows 32] [--rounds 3] [--model DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from reinforge.kernels import decode_gemm  # noqa: E402

SHAPES = {"q, k, v": (960, 576), "o": (576, 576), "gate, up": (3072, 576), "down": (576, 1536), "LM head": (49152, 576)}


def per_matrix(rows: int, rounds: int) -> None:
    flush = torch.empty(512 << 18)  # 512 MiB: more than the last-level cache
    print(f"| matrix [out, in] | torch, [in, out] copy | panels | x |  ({rows} rows, GFLOP/s)")
    print("|---|---|---|---|")
    for name, (out_features, in_features) in SHAPES.items():
        weight = torch.randn(out_features, in_features) * 0.02
        plain = weight.t().contiguous().t()  # the decoder's layout without panels
        panels = decode_gemm.PanelMatrix(weight)
        x = torch.randn(rows, in_features)
        best = {"torch": 0.0, "panels": 0.0}
        for _ in range(rounds):
            for variant, call in (("torch", lambda: F.linear(x, plain)), ("panels", lambda: decode_gemm.linear(x, panels))):
                flush.fill_(1.0)
                start = time.process_time()
                call()
                best[variant] = max(best[variant], 2 * rows * in_features * out_features / (time.process_time() - start) / 1e9)
        print(f"| {name} {out_features} x {in_features} | {best['torch']:.1f} | {best['panels']:.1f} | {best['panels'] / best['torch']:.2f} |", flush=True)


def rollouts(model_dir: str, rounds: int) -> None:
    from vs_trl_real import reinforge_overrides

    from reinforge.config import load_config
    from reinforge.engines.base import SamplingParams
    from reinforge.models.loading import load_model_and_tokenizer
    from reinforge.rollout.episodes import rollout_groups
    from reinforge.run.env_factory import build_env
    from reinforge.run.pipeline import build_engine
    from reinforge.tasks.registry import load_tasks

    args = types.SimpleNamespace(model=model_dir, new_tokens=128, group_size=4, tasks=8, kl=0.0, micro_batch=8, pairs=rounds, threads=1, set=[])
    cfg = load_config("default", reinforge_overrides(args))
    tasks = load_tasks(cfg.task, seed=cfg.trainer.seed).train
    model, tokenizer = load_model_and_tokenizer(cfg.model.path)
    env, engine = build_env(cfg, tokenizer), build_engine(cfg, model, tokenizer.pad_token_id)
    params = SamplingParams(max_new_tokens=128, temperature=1.0)
    default = decode_gemm.MIN_STREAMED_BYTES

    def rollout(variant: str, step: int):
        decode_gemm.MIN_STREAMED_BYTES = default if variant == "panels" else 1 << 62
        engine.release_memory()  # the next generate builds the decoder (and its panels) anew
        start = time.process_time()
        trajectories = rollout_groups(engine, env, tasks[step * 8 : (step + 1) * 8], 4, params, seed=step)
        return time.process_time() - start, trajectories

    rollout("panels", 0)  # warm-up: the kernels' build, the allocator
    times: dict[str, list[float]] = {"torch": [], "panels": []}
    print("| round | torch GEMM cpu-s | panels cpu-s | rows with the same tokens | load |")
    print("|---|---|---|---|---|")
    for round_ in range(rounds):
        samples = {}
        for variant in ("torch", "panels") if round_ % 2 == 0 else ("panels", "torch"):
            seconds, samples[variant] = rollout(variant, round_ + 1)
            times[variant].append(seconds)
        same = sum(a.token_ids == b.token_ids for a, b in zip(samples["torch"], samples["panels"]))
        print(f"| {round_ + 1} | {times['torch'][-1]:.2f} | {times['panels'][-1]:.2f} | {same} / 32 | {os.getloadavg()[0]:.1f} |", flush=True)
    plain, panels = statistics.median(times["torch"]), statistics.median(times["panels"])
    print(f"median: torch {plain:.2f}, panels {panels:.2f} cpu-s per rollout: {plain / panels:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", help="a Hugging Face directory: also time whole rollouts of it")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if not decode_gemm.available():
        sys.exit("the panel GEMM is unavailable here (it needs a C compiler and an AVX-512 CPU)")
    per_matrix(args.rows, args.rounds)
    if args.model:
        rollouts(args.model, args.rounds)


if __name__ == "__main__":
    main()
