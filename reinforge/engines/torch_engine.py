"""The default Engine: batched sampling from a PyTorch causal LM with a KV cache.

Llama-family models (llama, mistral, qwen2) take the fused decoder of `llama_decoder.py`; any
other causal LM, and a config it cannot run (`llama_decoder.unsupported_reason`, logged: sliding
windows, another activation), runs its own `transformers` forward with its own cache. Rows that
finish are dropped from the batch as the batch thins out, so a long-tail response does not make
every finished row keep paying for compute.

The engine samples on its model's device (CPU or a GPU); the uniform numbers that pick tokens are
drawn on the CPU from the seeded generator (reinforge.engines.sampling), so a seed means the same
draws on every device. A LoRA model (reinforge.models.lora) is sampled through a plain copy of the
base architecture that receives the merged weights W + s * B @ A at every `sync_weights`.
The fused decoder copies the weights it samples; a sharded learner's rank 0, whose loop model is
the policy's only full copy there, has it borrow them instead (reinforge.engines.borrowed_decoder).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel

from reinforge.engines import llama_decoder
from reinforge.kernels import choice
from reinforge.engines.base import Generation, SamplingParams
from reinforge.engines.borrowed_decoder import BorrowedLlamaDecoder
from reinforge.engines.borrowed_weights import unmerged_reason
from reinforge.engines.decode_hook import DecodeCheck, DecodeHook
from reinforge.engines.sampling import sample_next
from reinforge.models.lora import inference_copy, is_lora_model, merged_state_dict

# Prompts at least this wide are cached once per group when a group's rows come together: below
# it, the per-row cache and one attention call per step cost less than the two-part attention.
MIN_SHARED_PROMPT = 32
# The same with the C decode attention (a CPU float32 decoder's `native`): it reads each row's whole
# cache in one call per layer, while the two-part attention stays a dozen torch ops (two small
# batched matmuls each way, a cat, a softmax). SmolLM2-135M, 8 chat prompts of 36 tokens x 4 rows
# x 128 tokens, one thread, 3 interleaved rounds: 18.5 cpu-s a rollout shared, 16.9 per row
# (the shared path's `bmm` alone took 2.9 s). Reading the prompt once per group pays when the
# other G - 1 rows' copies cost more than those ops: the per-row kernel took ~0.1 us per row and
# key per layer, the two-part ops ~0.4 ms per layer and step more, so at 32 rows in groups of 4
# from ~130 prompt tokens on.
MIN_SHARED_PROMPT_NATIVE = 128


def min_shared_prompt(native: bool) -> int:
    """The prompt width from which a group's prompt is cached once (`native`: the C decode attention)."""
    return MIN_SHARED_PROMPT_NATIVE if native else MIN_SHARED_PROMPT

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
MAX_BATCH_SIZE = 512
logger = logging.getLogger(__name__)


@dataclass
class _HFState:
    cache: Any
    attention_mask: torch.Tensor
    next_position: torch.Tensor


class HFDecoder:
    """Fallback decoder for any causal LM: its own forward and cache, one call per token."""

    can_drop_rows = False

    def __init__(self, model: PreTrainedModel):
        self.model = model
        # transformers 5.24 renamed the forward's `past_key_values` to `cache` (the old name is
        # deprecated, to be removed in 5.40); earlier versions, which pyproject allows, know only the old.
        # (A peft model's forward takes **kwargs and passes them to its base model's.)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        self.cache_keyword = "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"

    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int):
        positions = (attention_mask.long().cumsum(1) - 1).clamp(min=0)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions, use_cache=True)
        state = _HFState(out[self.cache_keyword], attention_mask, attention_mask.sum(1))
        return out.logits[:, -1].float(), state

    def step(self, tokens: torch.Tensor, state: _HFState) -> torch.Tensor:
        state.attention_mask = torch.cat([state.attention_mask, torch.ones_like(tokens)[:, None]], dim=1)
        out = self.model(
            input_ids=tokens[:, None],
            attention_mask=state.attention_mask,
            position_ids=state.next_position[:, None],
            use_cache=True,
            **{self.cache_keyword: state.cache},
        )
        state.cache, state.next_position = out[self.cache_keyword], state.next_position + 1
        return out.logits[:, -1].float()


class TorchEngine:
    """Samples from `model` in this process. Call `sync_weights` after each learner update.

    `model` is the learner's: a plain model is sampled from directly (its weights are read at each
    sync); a LoRA model through `self.model`, a plain copy loaded with its merged weights at each sync.
    A lane (`lane()`, the async producer's engine) is a TorchEngine over a plain copy of its own: in
    one process, two sets of weights need two models. Only an engine that owns its model
    (`owns_model`) takes other weights (`load_weights`): the loop's engine samples the learner's.
    """

    supports_decode_hook = True

    def __init__(
        self,
        model: PreTrainedModel,
        pad_token_id: int,
        dtype: str = "float32",
        max_batch_size: int = MAX_BATCH_SIZE,
        fused: bool = True,
        decode_kernels: str = "auto",
        owns_model: bool = False,
        borrow_weights: bool = False,
    ):
        """`borrow_weights` (a sharded learner's rank 0): the fused decoder reads the model's own
        weight tensors instead of copying them (reinforge.engines.borrowed_decoder), when the engine
        samples in the model's dtype, and a LoRA model's adapters unmerged instead of sampling a
        merged copy; the model must then not change between a `sync_weights` and the sampling that
        follows it."""
        choice.check_mode(decode_kernels, "engine.decode_kernels")  # here, not at the first rollout
        self.owns_model = owns_model
        self.decode_kernels = decode_kernels
        self.source = model  # the learner's model
        self.pad_token_id = pad_token_id
        self.dtype = DTYPES[dtype]
        self.max_batch_size = max_batch_size
        lora = is_lora_model(model)
        base = model.get_base_model() if lora else model  # a LoRA model's: peft's layers in it
        reason = llama_decoder.unsupported_reason(base)
        self.fused = fused and reason is None
        if fused and reason is not None:
            logger.info("TorchEngine samples through transformers' forward (HFDecoder): the fused decoder cannot run this model: %s", reason)
        refusal = None
        if borrow_weights:
            if not self.fused:
                refusal = "only the fused decoder borrows"
            elif {p.dtype for p in base.parameters()} != {self.dtype}:
                refusal = f"rollout.engine_dtype={dtype} is not the model's dtype"
            elif lora:
                refusal = unmerged_reason(model)
            if refusal is not None:
                logger.info("TorchEngine copies the weights it samples: %s", refusal)
        self.borrow_weights = borrow_weights and refusal is None
        # what samples: the model itself (borrowed, a LoRA one's adapters unmerged), or a LoRA model's merged copy
        self.model = inference_copy(model) if lora and not self.borrow_weights else base
        self.policy_version = 0
        self._decoder: llama_decoder.FusedLlamaDecoder | HFDecoder | None = None

    def sync_weights(self, version: int) -> None:
        if is_lora_model(self.source) and not self.borrow_weights:  # the merged weights of the adapters trained so far
            self.model.load_state_dict(merged_state_dict(self.source))
        self.policy_version = version
        self._decoder = None  # rebuilt from the model's current weights on next use

    def stage_weights(self, version: int) -> None:
        """In one process nothing else samples this model: the same as sync_weights."""
        self.sync_weights(version)

    def lane(self) -> TorchEngine:
        """An engine like this one over a plain copy of its model (a LoRA policy's merged weights),
        to be given weights of its own with `load_weights` (the async rollout producer's)."""
        twin = TorchEngine(
            inference_copy(self.source), self.pad_token_id, max_batch_size=self.max_batch_size, fused=self.fused,
            decode_kernels=self.decode_kernels, owns_model=True,
        )
        twin.dtype = self.dtype
        twin.sync_weights(self.policy_version)
        return twin

    def load_weights(self, state: dict[str, torch.Tensor], version: int) -> None:
        """Sample with `state` as policy `version` from now on (an engine that owns its model only)."""
        if not self.owns_model:
            raise TypeError(
                "this TorchEngine samples the model it was given (the learner's): loading other weights would overwrite "
                "them; take a lane() (an engine over a model of its own) and load them there"
            )
        self.model.load_state_dict(state)
        self.sync_weights(version)

    def release_memory(self) -> None:
        """Drop the fused decoder's copy of the weights (a full copy, 0.5 GiB for a 135M model in
        fp32) until the next `generate` rebuilds it from the model, so that it is not held through
        the learner's update (verl's hybrid engine puts its rollout to sleep for the same reason).
        The sync schedule calls it after a step's rollout; the `sync_weights` that follows the update
        would drop the copy anyway, so the only cost is none. Between this call and that sync, a
        `generate` samples the model's weights as they are then."""
        self._decoder = None

    def _get_decoder(self):
        if self._decoder is None:
            fused = BorrowedLlamaDecoder if self.borrow_weights else llama_decoder.FusedLlamaDecoder
            self._decoder = fused(self.model, self.dtype, self.decode_kernels) if self.fused else HFDecoder(self.model)
        return self._decoder

    def generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        seed: int | None = None,
        budgets: list[int] | None = None,
        stop_when: Callable[[torch.Tensor], bool] | None = None,
        decode_hook: DecodeHook | None = None,
    ) -> list[Generation]:
        """`budgets` (optional): each row's own cap on new tokens (<= params.max_new_tokens).
        `stop_when` (optional, partial rollouts): called with the rows finished so far (bool [rows])
        each time a row finishes; when it returns True sampling ends and the unfinished rows come
        back with what they sampled, finish reason "aborted".
        `decode_hook` (optional, rollout pruning): called every `decode_hook.every` decode steps
        (reinforge.engines.decode_hook); the rows it stops come back with finish reason "pruned"."""
        if not prompts:
            return []
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        if budgets is not None and (len(budgets) != len(prompts) or min(budgets) < 1):
            raise ValueError("budgets needs one positive token budget per prompt")
        if decode_hook is not None and len(prompts) > self.max_batch_size:  # its rows index the call's prompts
            raise ValueError(f"decode_hook needs all {len(prompts)} prompts in one batch (max_batch_size={self.max_batch_size})")
        if stop_when is not None and len(prompts) > self.max_batch_size:
            raise ValueError(f"stop_when needs all {len(prompts)} prompts in one batch (max_batch_size={self.max_batch_size})")
        # Derived seeds (step, round, turn: trainer.seed * ~1.6e13 for a multi-turn env) can pass torch's
        # 64-bit range; mod 2**64 is torch's own reading of the seeds it takes (-1 is 2**64 - 1).
        generator = torch.Generator().manual_seed(seed % 2**64) if seed is not None else None
        was_training = self.model.training
        self.model.eval()
        try:
            results: list[Generation] = []
            for start in range(0, len(prompts), self.max_batch_size):
                end = start + self.max_batch_size
                row_budgets = None if budgets is None else budgets[start:end]
                results += self._generate_batch(prompts[start:end], params, generator, row_budgets, stop_when, decode_hook)
            return results
        finally:
            self.model.train(was_training)

    @torch.inference_mode()
    def _generate_batch(self, prompts, params: SamplingParams, generator, budgets=None, stop_when=None, decode_hook=None) -> list[Generation]:
        decoder = self._get_decoder()
        device = next(self.model.parameters()).device
        batch, width = len(prompts), max(len(p) for p in prompts)
        input_ids = torch.full((batch, width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((batch, width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            input_ids[row, width - len(prompt) :] = torch.tensor(prompt)
            attention_mask[row, width - len(prompt) :] = 1
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)

        # The cache holds the call's own rows x (longest prompt + steps) (reinforge.engines.kv_cache):
        # no row samples past its budget, so the largest budget bounds the steps.
        steps = params.max_new_tokens if budgets is None else min(params.max_new_tokens, max(budgets))
        out_tokens = torch.zeros((batch, steps), dtype=torch.long, device=device)
        out_logprobs = torch.zeros((batch, steps), device=device)
        lengths = torch.full((batch,), steps, dtype=torch.long, device=device)  # until a row samples a stop token
        hit_stop = torch.zeros(batch, dtype=torch.bool, device=device)
        stop = torch.tensor(sorted(set(params.stop_token_ids)), dtype=torch.long, device=device)
        rows = torch.arange(batch, device=device)  # original row of each entry still in the decoder's batch
        alive = torch.ones(batch, dtype=torch.bool, device=device)  # entries that have not stopped yet
        dense = True  # no row has stopped yet: entry i is row i, so whole columns are written
        limit = None if budgets is None else torch.tensor(budgets, dtype=torch.long, device=device).clamp(max=steps)
        if limit is not None:
            lengths = limit.clone()
        finished = torch.zeros(batch, dtype=torch.bool, device=device)  # rows done (stop token or budget), for stop_when
        aborted = False
        pruned = torch.zeros(batch, dtype=torch.bool, device=device)  # rows a decode_hook stopped

        logits, state = prefill_grouped(decoder, input_ids, attention_mask, steps)
        for step in range(steps):
            if decode_hook is not None and step and step % decode_hook.every == 0:
                live = alive.nonzero().squeeze(1)
                check = DecodeCheck(step, rows[live], logits[live], out_logprobs[rows[live], :step], finished.clone(), pruned.clone())
                stopping = live[decode_hook(check).to(device)]  # entries, like `alive`
                if len(stopping):
                    dense = False
                    lengths[rows[stopping]] = step
                    pruned[rows[stopping]] = True
                    alive[stopping] = False
                    if not alive.any():
                        break
            next_tokens, next_logprobs = sample_next(logits, params, generator)
            if dense:
                out_tokens[:, step] = next_tokens
                out_logprobs[:, step] = next_logprobs
            else:
                live_rows = rows[alive]
                out_tokens[live_rows, step] = next_tokens[alive]
                out_logprobs[live_rows, step] = next_logprobs[alive]
            newly_finished = False
            if len(stop):  # without stop tokens no row ever ends early: no bookkeeping per step
                stopped = torch.isin(next_tokens, stop) & alive
                if stopped.any():
                    dense, newly_finished = False, True
                    lengths[rows[stopped]] = step + 1
                    hit_stop[rows[stopped]] = True
                    alive &= ~stopped
                    finished[rows[stopped]] = True
                    if not alive.any():
                        break
            if limit is not None:  # rows whose own budget is spent end here ("length")
                spent = alive & (limit[rows] == step + 1)
                if spent.any():
                    dense, newly_finished = False, True
                    alive &= ~spent
                    finished[rows[spent]] = True
                    if not alive.any():
                        break
            if stop_when is not None and newly_finished and stop_when(finished.to("cpu", copy=True)):
                lengths[rows[alive]] = step + 1
                aborted = True
                break
            if step == steps - 1:
                break
            if not dense and decoder.can_drop_rows and alive.sum() * 2 <= len(rows):
                keep = alive.nonzero().squeeze(1)
                state.keep(keep)
                rows, next_tokens, alive = rows[keep], next_tokens[keep], alive[keep]
            logits = decoder.step(next_tokens, state)
        tokens, logprobs, stopped = out_tokens.tolist(), out_logprobs.tolist(), hit_stop.tolist()
        cut = (~finished).tolist() if aborted else [False] * batch
        stopped_by_hook = pruned.tolist()
        return [
            Generation(
                token_ids=tokens[row][:n],
                logprobs=logprobs[row][:n],
                finish_reason="stop" if stopped[row] else "pruned" if stopped_by_hook[row] else "aborted" if cut[row] else "length",
                policy_version=self.policy_version,
            )
            for row, n in enumerate(lengths.tolist())
        ]


def prefill_grouped(decoder, input_ids: torch.Tensor, attention_mask: torch.Tensor, steps: int):
    """The decoder's prefill (the fused decoder computes each token that rows share once). When the
    G rows of each group come together with one long prompt (as rollout_groups sends them), the
    prompt is also cached once and read once per group at every decode step
    (FusedLlamaDecoder.prefill_shared). Same logits and cache, to float rounding."""
    # a native decoder's tensors are CPU float32: only autocast and the thread count are left to ask
    native = getattr(decoder, "native", False) and choice.usable(torch.empty(0), decoder.decode_kernels)
    if decoder.can_drop_rows and input_ids.shape[1] >= min_shared_prompt(native):
        group_size = consecutive_group_size(torch.cat([input_ids, attention_mask], dim=1))
        if group_size > 1:
            return decoder.prefill_shared(input_ids[::group_size], attention_mask[::group_size], group_size, steps)
    return decoder.prefill(input_ids, attention_mask, steps)


def consecutive_group_size(rows: torch.Tensor) -> int:
    """G when `rows` [B, ...] are runs of G equal rows (B = D x G, G > 1), else 1."""
    same = (rows[1:] == rows[:-1]).all(dim=1)
    if not same.any():
        return 1
    breaks = (~same).nonzero()
    group_size = int(breaks[0]) + 1 if len(breaks) else len(rows)
    if len(rows) % group_size:
        return 1
    expected = torch.arange(1, len(rows), device=rows.device) % group_size != 0
    return group_size if torch.equal(same, expected) else 1
