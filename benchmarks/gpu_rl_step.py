"""One RL step on randomly initialised models of Qwen2.5-0.5B's and Qwen2.5-1.5B's shapes, bf16, on one GPU.

For each model: `--completions` completions of exactly `--length` sampled tokens (no stop token)
from random prompts of `--prompt-length` tokens, sampled by reinforge's TorchEngine, then
PolicyLearner.train_step (PPO-clip, bf16 autocast over float32 master weights and AdamW state)
on them, then the engine's weight sync: one warm-up step, then `--steps` timed steps (medians).
Reported, the way NeMo-RL publishes its numbers:

  tokens_per_s_per_gpu  tokens of the step's batch (prompt + completion, every row) / (step time x GPUs)
  mfu                   6 x params x tokens / step time / the card's dense bf16 peak (989 TFLOP/s on
                        H100 and H200, NVIDIA's spec sheet; None on other cards and on the CPU). The
                        step time includes the rollout, so this is the whole step's utilisation.
  peak_memory_gib       torch.cuda.max_memory_allocated over the model's steps
  engine_decode_tokens_per_s / hf_generate_tokens_per_s: sampled tokens per second of the engine's
                        generate and of `transformers` `generate` (do_sample, min = max new tokens)
                        on the same model, batch and bf16 autocast.

The models' shapes are those of the published config.json files (Qwen/Qwen2.5-0.5B and -1.5B);
the weights are random: speed and memory do not depend on them. Everything goes into one JSON
file (`--out`, by default $OUT/gpu_rl_step.json). `--tiny` (or REINFORGE_GPU_TEST_DEVICE=cpu)
shrinks the models and the batch so the script runs on the CPU in seconds, to test it.

    python benchmarks/gpu_rl_step.py [--completions 64] [--length 512] [--prompt-length 64] [--steps 2] [--tiny] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch
import transformers
from transformers import Qwen2Config, Qwen2ForCausalLM

from reinforge.config import AlgoConfig
from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.learner.batch import collate
from reinforge.learner.policy_learner import PolicyLearner
from reinforge.learner.policy_objective import make_policy_objective
from reinforge.rollout.trajectory import Trajectory

# Qwen/Qwen2.5-0.5B and Qwen/Qwen2.5-1.5B config.json (both tie the head to the embeddings).
QWEN_SHAPES = {
    "qwen2.5-0.5b-shape": dict(
        hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
        vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
    ),
    "qwen2.5-1.5b-shape": dict(
        hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
        vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
    ),
}
# The same architecture at a size a CPU runs in seconds (--tiny): GQA and a tied head kept.
TINY_SHAPE = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    vocab_size=512, tie_word_embeddings=True, max_position_embeddings=256, rope_theta=10000.0, rms_norm_eps=1e-6,
)
TINY_SIZES = dict(completions=4, length=8, prompt_length=4, steps=1)
DENSE_BF16_PEAK = {"H100": 989e12, "H200": 989e12}  # FLOP/s, dense (no sparsity)
PAD = 0

# For the printed estimate on an H100/H200: eager decode step times of a 64-row batch (memory- and
# launch-bound: about the same for both sizes), and the update's utilisation. Measured numbers
# replace these once a run exists; the estimate only says whether the script fits its 8 minutes.
EST_DECODE_STEP_S = {"qwen2.5-0.5b-shape": 0.025, "qwen2.5-1.5b-shape": 0.03}
EST_UPDATE_MFU = 0.25
EST_SETUP_S = 60.0  # pip installs, imports, building the models on the GPU


def non_embedding_params(model: torch.nn.Module) -> int:
    """Parameters a token's matmuls touch: all but the input embedding (the head shares it when
    tied, and its matmul counts: add it back)."""
    embedding = model.get_input_embeddings().weight
    total = sum(p.numel() for p in model.parameters())
    return total - embedding.numel() + (embedding.numel() if model.config.tie_word_embeddings else 0)


def estimate_seconds(completions: int, length: int, prompt_length: int, steps: int) -> float:
    total = EST_SETUP_S
    for name, shape in QWEN_SHAPES.items():
        params = shape_params(shape)
        tokens = completions * (prompt_length + length)
        update = 6 * params * tokens / (EST_UPDATE_MFU * 989e12)
        decode = length * EST_DECODE_STEP_S[name]
        total += (steps + 1) * (decode + update) + 2 * decode  # RL steps (one warm-up), then HF generate (warm-up + timed)
    return total


def shape_params(shape: dict) -> int:
    """Non-embedding parameters of a Qwen2 shape (plus the tied head), without building it."""
    h, i, layers = shape["hidden_size"], shape["intermediate_size"], shape["num_hidden_layers"]
    head_dim = h // shape["num_attention_heads"]
    kv = shape["num_key_value_heads"] * head_dim
    attention = h * h + 2 * h * kv + h * h + h + 2 * kv  # q, k, v (with biases), o
    per_layer = attention + 3 * h * i + 2 * h
    return layers * per_layer + h + shape["vocab_size"] * h


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for card, peak in DENSE_BF16_PEAK.items() if card in name), None)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, fn):
    sync(device)
    start = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - start


def trajectories_of(prompts: list[list[int]], generations) -> list[Trajectory]:
    return [
        Trajectory(
            task_id=f"t{i}", group_id=i // 8, token_ids=prompt + g.token_ids,
            loss_mask=[False] * len(prompt) + [True] * len(g.token_ids),
            behaviour_logprobs=[0.0] * len(prompt) + g.logprobs,
            turn_spans=[(len(prompt), len(prompt) + len(g.token_ids))], prompt_length=len(prompt),
            response_text="", policy_version=g.policy_version, finish_reason=g.finish_reason,
        )
        for i, (prompt, g) in enumerate(zip(prompts, generations))
    ]


def bench_model(name: str, shape: dict, args, device: torch.device) -> dict:
    config = Qwen2Config(**shape, pad_token_id=PAD, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    with torch.device(device):  # built where it runs: a 1.5B model's random init on the CPU alone takes a minute
        model = Qwen2ForCausalLM(config)
    params = non_embedding_params(model)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    learner = PolicyLearner(model, lr=1e-6, micro_batch_size=args.micro_batch_size, max_response_tokens=args.length, bf16_autocast=True)
    engine = TorchEngine(model, PAD, dtype="bfloat16")
    loss_fn = make_policy_objective(AlgoConfig())
    sampling = SamplingParams(max_new_tokens=args.length, temperature=1.0)  # no stop token: every row samples `length`
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, config.vocab_size, (args.completions, args.prompt_length), generator=g).tolist()
    phases = {"rollout_s": [], "update_s": [], "sync_s": [], "step_s": []}
    tokens = 0
    for step in range(args.steps + 1):  # step 0 warms up (kernels, allocator)
        generations, rollout_s = timed(device, lambda: engine.generate(prompts, sampling, seed=step))
        batch = collate(trajectories_of(prompts, generations), torch.randn(len(prompts), generator=g), PAD)
        batch.behaviour_logprobs = batch.old_logprobs  # one optimizer step per batch: old = behaviour
        _, update_s = timed(device, lambda: learner.train_step(batch, loss_fn))
        _, sync_s = timed(device, lambda: engine.sync_weights(learner.version))
        tokens = int(batch.attention_mask.sum())
        if step:
            for key, value in (("rollout_s", rollout_s), ("update_s", update_s), ("sync_s", sync_s), ("step_s", rollout_s + update_s + sync_s)):
                phases[key].append(value)
    sampled = args.completions * args.length
    median = {key: statistics.median(values) for key, values in phases.items()}
    peak = peak_flops(device)
    hf_s = hf_generate_seconds(model, prompts, args.length, device)
    return {
        "config": shape,
        "params_non_embedding_plus_head": params,
        "tokens_per_step": tokens,
        **median,
        "gpus": 1,
        "tokens_per_s_per_gpu": tokens / median["step_s"],
        "mfu": None if peak is None else 6 * params * tokens / median["step_s"] / peak,
        "peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
        "engine_decode_tokens_per_s": sampled / median["rollout_s"],
        "hf_generate_tokens_per_s": sampled / hf_s,
    }


@torch.no_grad()
def hf_generate_seconds(model, prompts: list[list[int]], length: int, device: torch.device) -> float:
    """`transformers` generate on the same model and prompts (bf16 autocast, as the engine): one
    warm-up on a short budget, then the timed call."""
    input_ids = torch.tensor(prompts, device=device)
    attention_mask = torch.ones_like(input_ids)

    def generate(new_tokens: int):
        with torch.autocast(device.type, dtype=torch.bfloat16):
            return model.generate(
                input_ids=input_ids, attention_mask=attention_mask, do_sample=True, max_new_tokens=new_tokens,
                min_new_tokens=new_tokens, pad_token_id=PAD, top_k=0, top_p=1.0, temperature=1.0,
            )

    generate(min(length, 8))
    out, seconds = timed(device, lambda: generate(length))
    assert out.shape[1] == input_ids.shape[1] + length, "transformers stopped early"
    return seconds


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--completions", type=int, default=64)
    parser.add_argument("--length", type=int, default=512, help="sampled tokens per completion")
    parser.add_argument("--prompt-length", type=int, default=64)
    parser.add_argument("--steps", type=int, default=2, help="timed RL steps per model (after one warm-up)")
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument("--tiny", action="store_true", help="tiny models and batch on the CPU (also REINFORGE_GPU_TEST_DEVICE=cpu)")
    parser.add_argument("--out", type=Path, default=None, help="the JSON file (default: $OUT/gpu_rl_step.json, else ./gpu_rl_step.json)")
    args = parser.parse_args(argv)
    tiny = args.tiny or os.environ.get("REINFORGE_GPU_TEST_DEVICE") == "cpu"
    if tiny:
        for key, value in TINY_SIZES.items():
            setattr(args, key, value)
        args.micro_batch_size = 2
    device = torch.device("cpu" if tiny else "cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_rl_step: torch sees no CUDA GPU here; run it on a GPU machine, or with --tiny on the CPU")
    estimate = estimate_seconds(64, 512, 64, 2) if tiny else estimate_seconds(args.completions, args.length, args.prompt_length, args.steps)
    print(f"gpu_rl_step: estimated {estimate:.0f} s on one H100/H200 at {args.completions if not tiny else 64} x "
          f"{args.length if not tiny else 512} (limit 480 s){' (this run: tiny, CPU)' if tiny else ''}", flush=True)
    torch.backends.cuda.matmul.allow_tf32 = True
    shapes = {name: TINY_SHAPE for name in QWEN_SHAPES} if tiny else QWEN_SHAPES
    result = {
        "machine": {
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
            "torch": torch.__version__, "transformers": transformers.__version__, "tiny": tiny,
        },
        "settings": {k: getattr(args, k) for k in ("completions", "length", "prompt_length", "steps", "micro_batch_size")},
        "estimate_s": estimate,
        "models": {},
    }
    start = time.perf_counter()
    for name, shape in shapes.items():
        result["models"][name] = bench_model(name, shape, args, device)
        print(f"gpu_rl_step: {name}: {json.dumps(result['models'][name] | {'config': None})}", flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    result["wall_s"] = time.perf_counter() - start
    out = args.out or Path(os.environ.get("OUT") or ".") / "gpu_rl_step.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"gpu_rl_step: wrote {out}")
    return result


if __name__ == "__main__":
    main()
