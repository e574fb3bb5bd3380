"""The policy learner: AdamW, gradient accumulation over micro-batches, clipping, bf16 autocast.

The optimizer holds the parameters that require a gradient: every weight, or only the adapters of a
LoRA model (reinforge.models.lora). Batches arrive on the CPU; each micro-batch moves to the model's
device (CPU or a GPU) for its forward, and results come back to the CPU."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from transformers import PreTrainedModel

from reinforge.algos.types import LossNormalizer
from reinforge.learner import packed_forward
from reinforge.learner.batch import TrainingBatch, micro_batches
from reinforge.learner.chunked_logprobs import DEFAULT_CHUNK_TOKENS
from reinforge.learner.compiled_forward import compile_forward as compile_forward_of
from reinforge.learner.logprobs import enable_activation_checkpointing, token_logprobs

# (new log-probs [n, T-1], entropy [n, T-1], both 0 outside the micro-batch's loss_mask, micro-batch, mini-batch counts)
#   -> (this micro-batch's share of the mini-batch loss, metrics)
LossFn = Callable[[torch.Tensor, torch.Tensor, TrainingBatch, LossNormalizer], tuple[torch.Tensor, dict[str, float]]]


class PolicyLearner:
    def __init__(
        self,
        model: PreTrainedModel,
        lr: float,
        weight_decay: float = 0.0,
        max_grad_norm: float = 1.0,
        micro_batch_size: int = 64,
        bf16_autocast: bool = False,
        temperature: float = 1.0,
        max_response_tokens: int = 1,
        entropy_grad: bool = False,
        compile_forward: bool = False,
        lr_warmup_steps: int = 0,
        pack_sequences: bool = True,
        packed_kernels: str = "auto",
        logprob_chunk_tokens: int | None = DEFAULT_CHUNK_TOKENS,
        max_tokens_per_microbatch: int | None = None,
        activation_checkpointing: bool = False,
        logprob_max_tokens: int | None = None,
    ):
        """`compile_forward`: torch.compile the model's forward in place (reinforge.learner.compiled_forward).
        `lr_warmup_steps`: the learning rate rises linearly over the first optimizer steps (see warmup_lr).
        `pack_sequences`: compute each distinct token once (reinforge.learner.packed_forward), for
        the model types it supports and without `compile_forward` (which compiles the padded forward).
        `packed_kernels`: auto, torch or native, the packed forward's kernels
        (reinforge.kernels.choice; native raises here where they cannot be built).
        `logprob_chunk_tokens`: tokens per chunk of the log-softmax over the vocabulary, forward and
        backward (reinforge.learner.chunked_logprobs); None computes the whole logits at once.
        `max_tokens_per_microbatch`: micro-batches by a token budget instead of
        `micro_batch_size` rows (reinforge.learner.batch.micro_batches).
        `activation_checkpointing`: decoder layers recompute their activations in the backward.
        `logprob_max_tokens`: the token budget of `logprobs` (no gradients); None: `max_tokens_per_microbatch`."""
        check_memory_settings(logprob_chunk_tokens, max_tokens_per_microbatch, logprob_max_tokens)
        if activation_checkpointing:
            enable_activation_checkpointing(model)
        self.logprob_chunk_tokens = logprob_chunk_tokens
        self.max_tokens_per_microbatch = max_tokens_per_microbatch
        self.logprob_max_tokens = logprob_max_tokens or max_tokens_per_microbatch
        self.activation_checkpointing = activation_checkpointing
        self.model = compile_forward_of(model) if compile_forward else model
        self.pack = pack_sequences and not compile_forward and packed_forward.supports(model)
        self.packed_kernels = packed_kernels
        packed_forward.native_kernels_wanted(packed_kernels)  # a bad mode, or native without a compiler, fails here
        self.max_response_tokens = max_response_tokens
        self.entropy_grad = entropy_grad
        self.trainable = [p for p in model.parameters() if p.requires_grad]  # LoRA: the adapters only
        self.optimizer = torch.optim.AdamW(self.trainable, lr=lr, weight_decay=weight_decay, fused=fused_adamw_fits(self.trainable) or None)
        self.lr, self.lr_warmup_steps = lr, lr_warmup_steps
        self.device = next(model.parameters()).device
        self.max_grad_norm = max_grad_norm
        self.micro_batch_size = micro_batch_size
        self.bf16_autocast = bf16_autocast
        self.temperature = temperature
        self.version = 0  # bumped on every optimizer step; engines sample from a known version

    @property
    def trained_model(self):
        """The module `train_step` runs: the model (rank 0 of a sharded group trains a sharded copy of it)."""
        return self.model

    @property
    def trainable_params(self) -> int:
        """Number of weights the optimizer updates (all of them, or the LoRA adapters)."""
        return sum(p.numel() for p in self.trainable)

    def _autocast(self):
        return autocast_on(self.device, self.bf16_autocast)

    def loss_normalizer(self, batch: TrainingBatch) -> LossNormalizer:
        """The counts losses (and metrics) are normalized by. A data-parallel learner
        (reinforge.distributed.ddp) returns the counts of the whole batch across its ranks."""
        return LossNormalizer(batch.num_loss_tokens, len(batch), self.max_response_tokens)

    def reduce_gradients(self) -> None:
        """Called between backward and clipping; a data-parallel learner all-reduces gradients here."""

    def pad_micro_batches(self, batch: TrainingBatch, done: int) -> None:
        """Called after the `done` micro-batches of `batch`; a sharded learner adds passes here so
        that every rank runs as many forwards and backwards (each one a collective)."""

    def clip_gradients(self) -> torch.Tensor:
        """Clip the gradients to max_grad_norm; their global norm before clipping. A sharded
        learner (reinforge.distributed.fsdp) gathers the norm of its gradient shards."""
        return torch.nn.utils.clip_grad_norm_(self.trainable, self.max_grad_norm)

    def train_step(self, batch: TrainingBatch, loss_fn: LossFn) -> dict[str, float]:
        """One optimizer step on `batch`, accumulated over micro-batches.

        The forward runs in eval mode, dropout off (as TRL, OpenRLHF and verl do for RL): the
        ratio pi_theta / pi_old must compare the policy that sampled (the engine samples in eval
        mode) with the same policy, so that before the first optimizer step it is exactly 1.
        With dropout on, each forward is a different random sub-network: on a GPT-2 config
        (dropout 0.1) the very first step showed ratio 0.93 and clip fraction 0.11.
        """
        self.trained_model.eval()
        # Under activation checkpointing the gradients stay allocated between steps, zeroed in place:
        # freed, the backward allocates them again layer by layer between the blocks of the layers it
        # recomputes and frees, where glibc's heap reuses less of the freed space (SmolLM2, 4 x 4 x
        # 128, fresh processes: the step's peak RSS median 3.63 GiB freed, 8 processes, 3.38-3.84;
        # 3.45 kept, 10 processes, 3.24-3.75). Checkpointing keeps so few activations that the kept
        # gradients add little to the forward's peak; without it the forward holds every layer's,
        # and freeing the gradients keeps them out of that peak. A weight that gets no gradient in
        # a step then still takes AdamW's step from its moments, as with Megatron's and DeepSpeed's
        # zeroed gradient buffers.
        self.optimizer.zero_grad(set_to_none=not self.activation_checkpointing)
        norm = self.loss_normalizer(batch)
        normalizer = float(max(norm.num_tokens, 1))
        totals: dict[str, float] = {}
        entropy_sum = 0.0
        done = 0
        for rows in micro_batches(batch.attention_mask, self.micro_batch_size, self.max_tokens_per_microbatch):
            done += 1
            micro = batch.select(rows).to(self.device)
            with self._autocast():
                logprobs, entropy = self.micro_batch_logprobs(micro)
            loss, metrics = loss_fn(logprobs, entropy, micro, norm)
            loss.backward()
            # Metrics are token-weighted means over micro-batches; the loss adds up as it is.
            weight = micro.num_loss_tokens / normalizer
            totals["loss"] = totals.get("loss", 0.0) + loss.item()
            for key, value in metrics.items():
                totals[key] = accumulate_metric(key, totals.get(key), value, weight)
            entropy_sum += (entropy.detach() * micro.loss_mask).sum().item()
        self.pad_micro_batches(batch, done)
        self.reduce_gradients()
        grad_norm = self.clip_gradients()
        if not torch.isfinite(grad_norm):
            raise FloatingPointError(f"non-finite gradient norm ({grad_norm}) at learner version {self.version}")
        for group in self.optimizer.param_groups:
            group["lr"] = warmup_lr(self.lr, self.version, self.lr_warmup_steps)
        self.optimizer.step()
        self.version += 1
        return {**totals, "grad_norm": grad_norm.item(), "entropy": entropy_sum / normalizer}

    def micro_batch_logprobs(self, micro: TrainingBatch, entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The update's forward of one micro-batch: (log-probs, entropy or None) [n, T-1] under the
        trained model, with gradients. A sharded learner runs it under FSDP's hooks
        (reinforge.distributed.sharded_forward)."""
        return token_logprobs(
            self.trained_model, micro.input_ids, micro.attention_mask, self.temperature, self.entropy_grad, self.pack,
            entropy=entropy, packed_kernels=self.packed_kernels, chunk_tokens=self.logprob_chunk_tokens,
            checkpoint_layers=self.activation_checkpointing, needed=micro.loss_mask,
        )

    @torch.no_grad()
    def logprobs(self, batch: TrainingBatch) -> torch.Tensor:
        """Log-probs of `batch` under the current weights, without gradients: [N, T-1]."""
        return compute_logprobs(
            self.model, batch, self.micro_batch_size, self.temperature, self._autocast, self.pack, self.packed_kernels,
            self.logprob_chunk_tokens, self.logprob_max_tokens,
        )


def fused_adamw_fits(params: list[torch.Tensor]) -> bool:
    """torch's fused AdamW (one kernel over each parameter instead of a dozen elementwise passes:
    0.1 against 0.25-0.37 cpu-s a step for SmolLM2's 134.5M weights, 1 thread) takes plain float
    tensors on the CPU or a GPU; it is also what transformers' Trainer (TRL) uses by default with
    torch >= 2.8. Sharded (DTensor) parameters keep the for-loop implementation."""
    return bool(params) and all(
        type(p.data) is torch.Tensor and p.device.type in ("cpu", "cuda") and p.dtype in (torch.float32, torch.float16, torch.bfloat16)
        for p in params
    )


def warmup_lr(lr: float, step: int, warmup_steps: int) -> float:
    """The learning rate of optimizer step `step` (0-based): lr * min(1, (step + 1) / warmup_steps).

    Why: Adam's first updates are sign steps. With fresh moments, m_hat / sqrt(v_hat) = g / |g| =
    +-1 for every weight, so step 1 moves every weight by the full lr whatever its gradient's
    size; on an RL batch whose gradient is mostly noise this is a large random move (measured on
    the describer/guesser game, micro model, lr 1e-3: the guesser's token entropy went from 0.85
    to 4.6 nats in one RL step, its moves to illegal byte tokens). A linear warm-up (as in
    Goyal et al. 2017, and the usual transformer schedule) lets the moment estimates settle
    first. Derived from the learner's version (its optimizer step count), so a resumed run
    continues the schedule exactly."""
    if warmup_steps <= 0:
        return lr
    return lr * min(1.0, (step + 1) / warmup_steps)


def accumulate_metric(key: str, total: float | None, value: float, weight: float) -> float:
    """One micro-batch's metric into the step's: keys ending in `_max` / `_min` are extremes,
    combined by max / min; every other metric is a mean, combined weighted by token share."""
    if key.endswith("_max"):
        return value if total is None else max(total, value)
    if key.endswith("_min"):
        return value if total is None else min(total, value)
    return (total or 0.0) + value * weight


def autocast_on(device: torch.device, bf16: bool):
    """bfloat16 autocast on `device`'s type (cpu or cuda), or nothing."""
    return torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


def check_memory_settings(
    logprob_chunk_tokens: int | None, max_tokens_per_microbatch: int | None, logprob_max_tokens: int | None = None,
) -> None:
    """A clear error for a chunk or a token budget that is not a positive number of tokens."""
    for key, value in (
        ("logprob_chunk_tokens", logprob_chunk_tokens), ("max_tokens_per_microbatch", max_tokens_per_microbatch),
        ("logprob_max_tokens", logprob_max_tokens),
    ):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise ValueError(f"algo.{key} must be a positive number of tokens or None, got {value!r}")


@torch.no_grad()
def compute_logprobs(
    model, batch: TrainingBatch, micro_batch_size: int, temperature: float, autocast=contextlib.nullcontext, pack: bool = False,
    packed_kernels: str = "auto", chunk_tokens: int | None = DEFAULT_CHUNK_TOKENS, max_tokens: int | None = None,
) -> torch.Tensor:
    """Log-probs of `batch` without gradients, [N, T-1], over micro-batches of `micro_batch_size`
    rows or of a `max_tokens` budget; `chunk_tokens` as in token_logprobs. Positions outside the
    batch's loss_mask may come back 0 (token_logprobs' `needed`)."""
    was_training = model.training
    model.eval()
    out = torch.zeros_like(batch.old_logprobs)
    device = next(model.parameters()).device
    for rows in micro_batches(batch.attention_mask, micro_batch_size, max_tokens):
        width = int(batch.attention_mask[rows].sum(1).max())  # right padding: trim to the longest row
        input_ids, attention_mask = batch.input_ids[rows, :width].to(device), batch.attention_mask[rows, :width].to(device)
        needed = batch.loss_mask[rows, : width - 1].to(device)
        with autocast():
            lp, _ = token_logprobs(
                model, input_ids, attention_mask, temperature, pack=pack, entropy=False, packed_kernels=packed_kernels,
                chunk_tokens=chunk_tokens, needed=needed,
            )
        out[rows, : lp.shape[1]] = lp.to(out.device)
    model.train(was_training)
    return out
