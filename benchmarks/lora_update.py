"""LoRA vs full fine-tuning: seconds of one learner update and one engine weight sync, same model and batch.

What is measured: one optimizer step (`train_step`: forward, backward, clipping, AdamW) on a batch
of `--rows` single-turn trajectories (the batch of learner_scaling.py), PPO-clip with token-mean
aggregation, one torch thread; and one `TorchEngine.sync_weights` followed by the first sampling
call's decoder build (the merge W + s * B @ A into the engine's copy under LoRA; a rebuild of the
fused decoder from the shared weights under full fine-tuning). The two variants run in rounds, one
step each per round in turn, so a shared machine's slow moments hit both alike; `x full` is the
median of the per-round ratio.

On a model this small the backward still runs through every frozen layer (LoRA saves the weight
gradients of W and AdamW on them, not the activation gradients), so expect little speed-up here;
what LoRA saves at this scale is optimizer memory (2 moments per trained weight).

    python benchmarks/lora_update.py [--preset micro] [--rows 256] [--tokens 16] [--rounds 5] [--r 8]
"""

from __future__ import annotations

import os
import statistics
import time

from reinforge.config import LoraConfig
from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.learner.policy_learner import PolicyLearner
from reinforge.models.lora import apply_lora
from reinforge.models.tiny_llama import build_tiny_llama

from learner_scaling import update_arguments, update_setup


def main() -> None:
    parser = update_arguments(__doc__.split("\n\n")[0])
    parser.add_argument("--r", type=int, default=8)
    args = parser.parse_args()
    tokenizer, batch, _, loss_fn, kwargs = update_setup(args)
    lora = LoraConfig(r=args.r, alpha=2.0 * args.r)

    full = PolicyLearner(build_tiny_llama(tokenizer, args.preset, seed=0), **kwargs)
    adapted = PolicyLearner(apply_lora(build_tiny_llama(tokenizer, args.preset, seed=0), lora), **kwargs)
    variants = {"full": full, f"lora r={args.r}": adapted}
    engines = {name: TorchEngine(learner.model, tokenizer.pad_token_id) for name, learner in variants.items()}
    probe = [tokenizer("1+2=").input_ids]
    update: dict[str, list[float]] = {name: [] for name in variants}
    sync: dict[str, list[float]] = {name: [] for name in variants}
    for learner in variants.values():  # warm-up
        learner.train_step(batch, loss_fn)
    for version in range(1, args.rounds + 1):
        for name, learner in variants.items():
            start = time.perf_counter()
            learner.train_step(batch, loss_fn)
            update[name].append(time.perf_counter() - start)
            start = time.perf_counter()
            engines[name].sync_weights(version)
            engines[name].generate(probe, SamplingParams(1, 0.0), seed=0)  # builds the decoder from the synced weights
            sync[name].append(time.perf_counter() - start)

    load = os.getloadavg()[0]
    print(f"{args.preset}: one optimizer step on {args.rows} rows x {args.tokens} sampled tokens, {args.rounds} rounds (load {load:.1f})")
    print(f"{'variant':<10} {'trained weights':>16} {'update s':>9} {'x full':>7} {'sync s':>8}")
    for name, learner in variants.items():
        ratio = statistics.median(a / b for a, b in zip(update["full"], update[name]))
        print(f"{name:<10} {learner.trainable_params:>16,} {statistics.median(update[name]):>9.3f} {ratio:>6.2f}x {statistics.median(sync[name]):>8.4f}")


if __name__ == "__main__":
    main()
