"""Supervised warm-up: next-token cross-entropy on each task's worked completion.

Only the policy's tokens are trained (prompt and env observations are context), and each example
is tokenized by the env the way RL will see it: for a multi-turn demonstration, the assistant
turns closed by the end-of-turn token, with the tool results between them as observations.

With `model.lora` set the warm-up still trains every weight: it teaches the format and the base
skill, and RL then trains adapters on top of the warmed-up model (reinforge.models.lora).
"""

from __future__ import annotations

import math
import random
import time

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

from reinforge.config import SFTConfig
from reinforge.envs.base import Env
from reinforge.tasks.task import Task
from reinforge.telemetry import MetricsLogger, ProgressDisplay
from reinforge.runtime.graceful_stop import GracefulStop
from reinforge.runtime.run_errors import RunInterrupted


def sft_batch(examples: list[tuple[list[int], list[bool]]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded (input ids, attention mask, target mask) from (ids, trained-token mask) pairs."""
    width = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    target_mask = torch.zeros_like(input_ids, dtype=torch.bool)
    for row, (ids, trained) in enumerate(examples):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attention_mask[row, : len(ids)] = 1
        target_mask[row, : len(ids)] = torch.tensor(trained)
    return input_ids, attention_mask, target_mask


def sft_loss(model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor, target_mask: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits[:, :-1]
    targets = input_ids[:, 1:].masked_fill(~target_mask[:, 1:], -100)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), ignore_index=-100)


def warmup_cosine(step: int, warmup: int, total: int) -> float:
    """Learning-rate multiplier: linear warm-up, then cosine decay to 10%."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def run_sft(
    model: PreTrainedModel,
    env: Env,
    tasks: list[Task],
    cfg: SFTConfig,
    seed: int,
    logger: MetricsLogger | None = None,
    show_progress: bool = True,
    stop: GracefulStop | None = None,
) -> list[float]:
    """Train `model` in place for `cfg.steps` steps; return the loss of every step.

    A stop request (SIGINT / SIGTERM) ends the warm-up at once without a checkpoint: a resumed run
    repeats it from the start, which reproduces it exactly."""
    if cfg.steps == 0:
        return []
    if not tasks:
        raise ValueError("supervised warm-up needs training tasks")
    examples = [env.sft_example(task) for task in tasks]
    pad = env.tokenizer.pad_token_id
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_cosine(s, cfg.warmup_steps, cfg.steps))
    rng = random.Random(seed)
    order: list[int] = []
    losses = []
    start = time.perf_counter()
    model.train()
    device = next(model.parameters()).device  # batches are built on the CPU
    with ProgressDisplay(cfg.steps, "SFT warm-up", enabled=show_progress) as progress:
        for step in range(cfg.steps):
            if len(order) < cfg.batch_size:  # epochs of shuffled examples
                order += rng.sample(range(len(examples)), len(examples))
            batch = [examples[i] for i in order[: cfg.batch_size]]
            del order[: cfg.batch_size]
            loss = sft_loss(model, *(t.to(device) for t in sft_batch(batch, pad)))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
            if logger is not None and (step % 10 == 0 or step == cfg.steps - 1):
                # time/sft: seconds since the warm-up began; the last record's is the warm-up's time,
                # which the console summary and `reinforge report` both read from the log.
                metrics = {"loss": losses[-1], "lr": scheduler.get_last_lr()[0], "time/sft": time.perf_counter() - start}
                logger.log(step, metrics, stage="sft")
            progress.update(step + 1, {"loss": losses[-1]})
            if stop is not None and stop.requested is not None:
                raise RunInterrupted(stop.requested, 0, None)
    return losses
