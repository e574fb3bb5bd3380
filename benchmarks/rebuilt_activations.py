"""Rebuilding the norms' outputs and SiLU(gate) x up in the backward (reinforge.learner.rebuilt_activations)
on a real model: the update's peak memory and CPU time at two micro-batch token budgets, with and without it
(and, with a third field `recomputed`, the LM head's log-softmax recomputed in the backward rather than
kept from the forward: reinforge.learner.chunked_logprobs.KEEP_ROWS_SHARE).

What is measured: row A of docs/real_model.md's comparison with TRL (8 prompts of 36 tokens x 4
completions of 128, KL 0.04, fp32, one thread), one `PolicyLearner.train_step` over the 32 rows
after a one-row warm-up step (so the gradients and AdamW's moments exist, as from step 2 on).
Each configuration runs in a fresh process: `peak` is the update's VmHWM (reset just before it),
`above` that peak less the RSS before the update, `cpu` the update's process time. Configurations
are run in interleaved rounds (the machine is shared: compare within a round). The same process
also hashes the trained weights, so runs with and without rebuilding can be checked bit for bit.

    python benchmarks/rebuilt_activations.py --model DIR [--rounds 3] [--configs 672:kept,1344:rebuilt,672:rebuilt:recomputed] [--heap release]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

PROMPTS, GROUP, PROMPT_TOKENS, NEW_TOKENS = 8, 4, 36, 128


def status_bytes(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def one_update(model_dir: str, budget: int, rebuild: bool, retain: bool = True, keep_log_softmax: bool = True) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from reinforge.config import load_config
    from reinforge.learner import chunked_logprobs, packed_forward
    from reinforge.learner.batch import TrainingBatch
    from reinforge.learner.policy_learner import PolicyLearner
    from reinforge.learner.policy_objective import make_policy_objective
    from reinforge.runtime.process_settings import configure_process

    cfg = load_config("default", [
        "algo.kl_coef=0.04", f"algo.max_tokens_per_microbatch={budget}", "trainer.threads=1", f"trainer.retain_freed_memory={retain}",
    ])
    configure_process(cfg.trainer.threads, cfg.trainer.cpus, cfg.trainer.retain_freed_memory)
    packed_forward.REBUILD_CHEAP_ACTIVATIONS = rebuild
    if not keep_log_softmax:
        chunked_logprobs.KEEP_ROWS_SHARE = 0.0
    a = cfg.algo
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    learner = PolicyLearner(
        model, a.lr, a.weight_decay, a.max_grad_norm, a.micro_batch_size, a.bf16_autocast, 1.0, NEW_TOKENS,
        pack_sequences=a.pack_sequences, packed_kernels=a.packed_kernels, logprob_chunk_tokens=a.logprob_chunk_tokens,
        max_tokens_per_microbatch=a.max_tokens_per_microbatch,
    )
    loss_fn = make_policy_objective(a)
    g = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    prompts = [torch.randint(3, vocab, (PROMPT_TOKENS,), generator=g) for _ in range(PROMPTS)]
    ids = torch.stack([torch.cat([p, torch.randint(3, vocab, (NEW_TOKENS,), generator=g)]) for p in prompts for _ in range(GROUP)])
    rows, width = ids.shape
    loss_mask = torch.zeros(rows, width - 1, dtype=torch.bool)
    loss_mask[:, PROMPT_TOKENS - 1 :] = True
    old = -torch.rand(rows, width - 1, generator=g) * 8
    batch = TrainingBatch(
        ids, torch.ones_like(ids), loss_mask, old, torch.randn(rows, generator=g), ref_logprobs=old - 0.1 * torch.rand(rows, width - 1, generator=g),
    )
    warm = TrainingBatch(
        input_ids=torch.tensor([[1, 2, 3, 4]]), attention_mask=torch.ones(1, 4, dtype=torch.long),
        loss_mask=torch.ones(1, 3, dtype=torch.bool), old_logprobs=torch.full((1, 3), -1.0), advantages=torch.ones(1),
        ref_logprobs=torch.full((1, 3), -1.0),
    )
    learner.train_step(warm, loss_fn)
    order = torch.randperm(rows, generator=torch.Generator().manual_seed(0))
    shuffled = batch.select(order)
    before = status_bytes("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # a new high-water mark from here (Linux >= 4.0)
    start = time.process_time()
    metrics = learner.train_step(shuffled, loss_fn)
    cpu = time.process_time() - start
    peak = status_bytes("VmHWM")
    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().numpy().tobytes())
    return {
        "budget": budget, "rebuild": rebuild, "keep_log_softmax": keep_log_softmax, "peak": peak, "above": peak - before, "cpu": cpu,
        "loss": metrics.get("loss"), "weights_sha": digest.hexdigest()[:16],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a HF model directory (SmolLM2-135M-Instruct)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--configs", default="672:kept,1344:rebuilt", help="budget:kept|rebuilt[:recomputed], comma-separated")
    parser.add_argument("--heap", choices=["retain", "release"], default="retain",
                        help="trainer.retain_freed_memory on (the default: peaks include the heap's layout) or off")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # one of --configs, run in this process
    args = parser.parse_args()
    if args.one:
        budget, mode, *log_softmax = args.one.split(":")
        keep = log_softmax != ["recomputed"]
        print(json.dumps(one_update(args.model, int(budget), mode == "rebuilt", args.heap == "retain", keep)))
        return
    for round_ in range(args.rounds):
        for config in args.configs.split(","):
            load = Path("/proc/loadavg").read_text().split()[0]
            command = [sys.executable, __file__, "--model", args.model, "--heap", args.heap, "--one", config]
            out = subprocess.run(command, capture_output=True, text=True, check=True)
            result = json.loads(out.stdout.strip().splitlines()[-1])
            print(json.dumps({"round": round_, "config": config, "heap": args.heap, "load": float(load), **result}), flush=True)


if __name__ == "__main__":
    main()
