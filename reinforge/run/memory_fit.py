"""Will one RL step fit in memory? Predicted from the model's config and the run's settings, before
any model is loaded (invariant 3), and refused with the numbers and the knobs when it cannot fit.

The step's parts and what each holds (bytes; P = the model's distinct weights, tied embeddings
once, counted on the meta device; T = trainable weights, P or the LoRA adapters'):

    resident, the whole step:
      runtime          RUNTIME_BYTES: the interpreter with torch, transformers and reinforge imported
      weights          4 P            (loaded float32; bf16 autocast keeps float32 weights)
      AdamW state      2 x 4 T        (exp_avg, exp_avg_sq, float32)
      reference        4 P            when a reference is loaded (algo.kl_coef > 0 or algo.ace_alpha > 0)
                                      and the policy is not LoRA (whose reference is its base, no copy;
                                      after an algo.ref_reset_every reset, the base plus a copy of the
                                      adapters: 4 T)
      engine copy      bytes(engine_dtype) P  TorchEngine's fused decoder copies every matrix ([in, out]
                                      layout; tied embeddings once): resident under the async
                                      schedule; the sync schedule releases it after each rollout, so
                                      it counts in the rollout and evaluation phases only. A LoRA
                                      policy adds the plain float32 model the engine samples from
                                      (4 P, resident). The transformers fallback samples from the
                                      model itself (no copy).
      critic           4 x 4 P_c      weights, gradients, AdamW state of the value model (critic.enabled)
    plus the largest of the phases:
      rollout          gradients (4 T, kept from the last update) + the KV cache of one engine batch
                       + decode and prefill transients
      no-grad forward  gradients + one layer's transients + a log-prob chunk (reference, old log-probs)
      update           activations of one micro-batch + the log-prob chunk's forward/backward buffers
                       (+ gradients when a mini-batch takes several micro-batches, or under activation
                       checkpointing: otherwise `zero_grad(set_to_none)` frees them at the start of each
                       optimizer step, and the first backward makes them again)
      optimizer        gradients + AdamW's temporaries
      evaluation       gradients + the KV cache of one batch of held-out episodes
      weight sync      LoRA: the merged matrices W + s B A, made at every sync

KV cache (reinforge.engines.kv_cache.kv_cache_bytes): 2 x layers x rows x tokens x kv_heads x head_dim
x bytes, rows = min(prompts_per_step x group_size, engine batch of 512), tokens = longest prompt +
max_new_tokens; when a group shares a prompt of min_shared_prompt+ tokens (torch_engine) the engine caches it once
per group (prefill_shared, whose prefill cache of the distinct prompts is alive at the same time).

Activations (per layer; H hidden, q = heads x head_dim, kv = kv_heads x head_dim, I the MLP width):
the tensors autograd saves, counted with saved_tensors_hooks (tests/run/test_memory_fit.py checks
the counts on a small model):
    C kernels (algo.packed_kernels auto on a 1-thread CPU float32 run), per token:
        2H + 2q + 2kv + 2I + heads   (two norms' inputs, q k v and the attention output, its
        log-sum-exp, gate and up: 5,769 numbers on SmolLM2; the norms' outputs and SiLU(gate) x up
        are rebuilt in the backward, reinforge.learner.rebuilt_activations). The layer that
        activation checkpointing recomputes, and a sharded learner's layers, keep those too:
        4H + 2q + 2kv + 3I + heads (8,457 on SmolLM2).
    torch's ops (a GPU, bf16 autocast, several threads, algo.packed_kernels=torch):
        6H + 4I per token (transformers' RMSNorm keeps x, x * rsqrt and the output; SiLU its input
        and output), and SDPA's q, its output and log-sum-exp (2q + heads) per query slot and k, v
        (2kv) per key slot of the padded layout it runs on (rows x width; a group's later rows
        query from where they diverge, reinforge.learner.packed_forward.plan_attention). On a GPU in
        float32 with grouped-query attention SDPA takes its math backend (flash takes no float32,
        the memory-efficient kernel no GQA): k and v repeated to every head (2q per key slot) and
        the [rows, heads, T, T] probabilities (measured on an H200, torch 2.11: 14,122 numbers per
        token per layer on SmolLM2's shape with 32 rows of 40 + 128 tokens; predicted 14,257).
    plus, per token, the embedding, the final norm and the hidden states the log-probs read (4H).
With algo.activation_checkpointing each layer keeps only its input (H per token per layer), and
one layer's activations are rebuilt at a time in the backward. Tokens of a micro-batch: the
packed forward (algo.pack_sequences) computes each distinct token once, so a group's prompt
counts once: distinct groups x prompt + rows x response; the padded forward rows x width. Rows of
a micro-batch: algo.micro_batch_size, or as many full-length rows as algo.max_tokens_per_microbatch
holds (reinforge.learner.batch.micro_batches). The mini-batch's rows come in random order, so a
micro-batch of m of the n = D x G rows holds D (1 - C(n - G, m) / C(n, m)) groups on average.

Log-prob chunk (reinforge.learner.chunked_logprobs): forward two [chunk, V] float32 buffers (the
log-softmax and its exp for the entropy); backward two more, the [V, H] float32 gradient of the
output layer and one [V, H] product per chunk. algo.logprob_chunk_tokens = None: the whole
[tokens, V] logits, log-softmax and entropy terms (3 x tokens x V x 4).

Checkpointing: the learner keeps the gradients allocated between steps, zeroed in place, so the
update counts them beside the layer inputs (reinforge.learner.policy_learner.train_step). Freed,
the backward allocated them again between the blocks of the layers it recomputed and freed, where
glibc's heap reuses less of the freed space (SmolLM2, 4 x 4 rows of 36 + 128 tokens, the step's
peak in fresh processes: median 3.63 GiB freed, 3.45 kept; each varies by 0.5 GiB between
processes, as the rollout's freed blocks are reused or not).

Heap fragmentation on a CPU: in fresh processes of the same step, the update's forward grew per
layer by what the layer saves, or by that plus about one [tokens, I] block (SmolLM2, forward
traced layer by layer: 4 x 4 x 128, 1 process of 4 at 0.047 GiB a layer, the saved tensors, 3 at
0.057-0.061; 8 x 4 x 128, 2 of 8 at 0.094, 6 at 0.12; a [tokens, I] block is 0.0125 and 0.025 GiB).
glibc puts some of a layer's smaller saved tensors into the blocks the layer before freed, and the
layout differs from process to process (a fixed PYTHONHASHSEED does not fix it). Counted as that
bound, one [tokens, I] block per layer, without checkpointing (traced on the C kernels' path,
counted on torch's CPU path too, where it was not measured); the CUDA caching allocator rounds and
reuses blocks by size: not counted on a GPU.

LoRA on a CPU: each adapted layer's forward makes [tokens, out] temporaries (the base output, the
adapter's, their scaled sum) and keeps the adapter's small [tokens, r] input projection for the
backward. An earlier engine, which kept each prefill's KV cache beside the shared copy, left the heap
in a layout where those small blocks split the freed temporaries' space (1.8 GiB of the heap free at
the update's peak, measured 6.12 GiB on 4 x 4 x 128, r = 8); since the engine stopped keeping it,
the same step peaks at 4.28-4.41 GiB on two machines, within 5% of the tensors in use. No term for
it: a layout that the order of earlier allocations decides is not something to predict.

What it leaves out, and why: the Python objects of trajectories and batches (kilobytes per row);
glibc's retained heap (trainer.retain_freed_memory) adds a few percent (measured +2.3% on SmolLM2);
Ray rollout workers and vLLM run in other processes (the vLLM engine's own KV cache,
engine.kv_cache_gib, is counted since it shares the machine; its weights too), data-parallel
followers are counted as one more copy of the learner's resident state each. Multi-turn rows are
taken at prompt + max_turns x max_new_tokens (env observations unknown before the tasks run), or
env.max_episode_tokens when set.

Measured against this prediction (tests/run/test_memory_fit_accuracy.py: one steady-state step in a
fresh process, peak RSS; rows x samples x forced new tokens, chat prompts of 36 tokens; 2-core AMD
EPYC, 1 thread, retain_freed_memory on; 2026-11-29):
    SmolLM2-135M-Instruct  4x4x64, KL 0.04               predicted 3.84 GiB, measured 3.71 (+3.4%)
                           8x4x128                        predicted 5.99 GiB, measured 6.27 (-4.4%)
                           4x4x128, checkpointing         predicted 3.10 GiB, measured 3.28 (-5.3%)
                           4x4x128, LoRA r=8, KL 0.04     predicted 3.70 GiB, measured 3.95 (-6.4%)
    small preset (25M)     8x4x64                         predicted 1.39 GiB, measured 1.41 (-1.9%)
(Before the heap-fragmentation term and the kept gradients under checkpointing, the same machine
measured 8x4x128 at 5.08-6.92 GiB against 5.23 predicted, and checkpointing at 3.38-3.84 against
4.46: CI failed at +26.4%.)
On an H200 (SmolLM2's shape, random weights, 16x8x256 with prompts of 40 tokens; peak
torch.cuda.max_memory_reserved): KL 0.04 predicted 32.35 GiB then (31.85 now), measured 35.44
(-8.7%; 31.90 allocated); checkpointing with an 8,192-token budget predicted 4.26 GiB then (4.08
now), measured 5.01 (-15.1%; 4.14 allocated: the caching allocator keeps the rollout's freed
blocks). Both measured while the engine still held its copy through the update; not re-run since
(no GPU lent to the sessions that changed it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from reinforge.config import Config
from reinforge.engines.kv_cache import kv_cache_bytes, shared_prompt_kv_cache_bytes
from reinforge.engines.torch_engine import MAX_BATCH_SIZE, min_shared_prompt
from reinforge.run.model_shape import ModelShape, run_shapes

GIB = 1 << 30
MIB = 1 << 20
# RSS of a process that has imported torch, transformers (with Llama's modeling code) and reinforge's
# pipeline: 427 MiB measured (torch 2.13 CPU, transformers 5, Python 3.12: torch alone 276 MiB, with
# transformers 300, with LlamaForCausalLM 398), plus ~50 MiB that a real tokenizer (49k entries), the
# task list and the C kernels add once loaded (1503 MiB measured with SmolLM2 and its reference
# loaded = 427 + 2 x 513 + 50).
RUNTIME_BYTES = 480 * MIB


@dataclass
class MemoryEstimate:
    """Predicted bytes: `resident` for the whole step, plus the largest of `phases`."""

    resident: dict[str, int]
    phases: dict[str, dict[str, int]]
    notes: dict[str, str] = field(default_factory=dict)  # term -> how it was sized, for the message

    def phase_total(self, name: str) -> int:
        return sum(self.phases[name].values())

    @property
    def peak_phase(self) -> str:
        return max(self.phases, key=self.phase_total)

    @property
    def peak(self) -> int:
        return sum(self.resident.values()) + self.phase_total(self.peak_phase)

    def peak_of(self, phases: list[str]) -> int:
        """The peak over some phases only (a measurement that skips evaluation, say)."""
        return sum(self.resident.values()) + max(self.phase_total(p) for p in phases if p in self.phases)

    def terms(self) -> list[tuple[str, int]]:
        """Resident terms and the peak phase's, largest first (zeros left out)."""
        merged = {**self.resident}
        for name, size in self.phases[self.peak_phase].items():
            merged[name] = merged.get(name, 0) + size
        return sorted(((k, v) for k, v in merged.items() if v > 0), key=lambda kv: -kv[1])

    def describe(self) -> str:
        parts = ", ".join(f"{name} {gib(size)}" + (f" ({self.notes[name]})" if name in self.notes else "") for name, size in self.terms())
        return f"{gib(self.peak)} at its peak (the {self.peak_phase}): {parts}"


def gib(size: int) -> str:
    return f"{size / GIB:.2f} GiB"


@dataclass(frozen=True)
class StepSizes:
    """Rows and tokens of one step, from the config and the longest prompt."""

    rows: int
    groups: int
    prompt: int
    response: int

    @property
    def row_tokens(self) -> int:
        return self.prompt + self.response


def step_sizes(cfg: Config, prompt_tokens: int) -> StepSizes:
    r, env = cfg.rollout, cfg.env
    if env.type == "single_turn":
        response = r.max_new_tokens
    else:  # every turn's budget (observations between turns are not known before the tasks run)
        response = r.max_new_tokens * env.max_turns
        if env.max_episode_tokens:
            response = min(response, max(env.max_episode_tokens - prompt_tokens, r.max_new_tokens))
    return StepSizes(r.prompts_per_step * r.group_size, r.prompts_per_step, prompt_tokens, response)


def expected_groups(rows: int, groups: int, picked: int) -> float:
    """Distinct groups among `picked` of `rows` rows in random order (groups of rows / groups)."""
    size = rows // max(groups, 1)
    if picked >= rows or size <= 1:
        return min(groups, picked) if size > 1 else picked
    if rows - size < picked:  # every group has a row among those picked
        return groups
    # C(rows - size, picked) / C(rows, picked): the chance that a group has no row among those picked
    miss = math.exp(
        math.lgamma(rows - size + 1) + math.lgamma(rows - picked + 1) - math.lgamma(rows - size - picked + 1) - math.lgamma(rows + 1)
    )
    return groups * (1 - miss)


def layer_floats(shape: ModelShape, native: bool, rebuilt: bool = False) -> int:
    """Saved numbers per token of one decoder layer's forward when every row computes its own
    tokens (no shared prompt, so the attention's padded layout holds the same tokens). `rebuilt`:
    the C kernels' update forward rebuilds the norms' outputs and SiLU(gate) x up in the backward
    (reinforge.learner.rebuilt_activations) instead of keeping them."""
    h, q, kv, i = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim, shape.intermediate
    if native:
        return (2 * h + 2 * q + 2 * kv + 2 * i + shape.heads) if rebuilt else (4 * h + 2 * q + 2 * kv + 3 * i + shape.heads)
    return 6 * h + 2 * q + 2 * kv + 4 * i + shape.heads


def chooses_native(mode: str, cfg: Config, float32: bool) -> bool:
    """reinforge.kernels.choice.usable's decision for a part in `mode`, from the config: CPU tensors
    in float32, one thread unless native is asked for. (Whether a C compiler is there is not checked
    here: without one the torch path's larger counts apply.)"""
    if mode == "torch" or cfg.model.device != "cpu" or not float32:
        return False
    return mode == "native" or cfg.trainer.threads == 1


def uses_native_kernels(cfg: Config) -> bool:
    """algo.packed_kernels' choice as the learner makes it (bf16 autocast hands the kernels bf16)."""
    return chooses_native(cfg.algo.packed_kernels, cfg, float32=not cfg.algo.bf16_autocast)


def uses_native_decode(cfg: Config) -> bool:
    """engine.decode_kernels' choice as the engine makes it (its weights in rollout.engine_dtype)."""
    return chooses_native(cfg.engine.decode_kernels, cfg, float32=cfg.rollout.engine_dtype == "float32")


def sdpa_materializes_scores(cfg: Config, shape: ModelShape) -> bool:
    """CUDA, float32, grouped-query attention: torch's SDPA takes its math backend (flash takes no
    float32, the memory-efficient kernel no GQA), which keeps the [rows, heads, T, T] probabilities
    and k, v repeated to every head for the backward (measured on an H200 with torch 2.11:
    14,122 numbers saved per token per layer on SmolLM2's shape, 32 rows of 40 + 128 tokens)."""
    return cfg.model.device.startswith("cuda") and not cfg.algo.bf16_autocast and shape.kv_heads != shape.heads


@dataclass(frozen=True)
class MicroBatch:
    """The update's largest micro-batch: its rows, the groups among them, the tokens its forward
    computes (distinct ones when packed), the rows' width, and how many micro-batches a mini-batch takes."""

    rows: int
    groups: float
    tokens: int
    width: int
    prompt: int
    count: int
    packed: bool

    def attention_slots(self) -> tuple[int, int, int]:
        """(query slots, key slots, query x key pairs) of the padded layout SDPA runs on (torch's
        ops): rows that share a prompt of a quarter of the width or more with an earlier row attend
        from where they diverge (reinforge.learner.packed_forward.plan_attention)."""
        w, g = self.width, min(self.groups, self.rows)
        if self.packed and g < self.rows and self.prompt >= 0.25 * w:
            late = self.rows - g
            return math.ceil(g * w + late * (w - self.prompt)), self.rows * w, math.ceil((g * w + late * (w - self.prompt)) * w)
        return self.rows * w, self.rows * w, self.rows * w * w


def micro_batch(cfg: Config, sizes: StepSizes, shape: ModelShape, no_grad: bool = False) -> MicroBatch:
    """The update's micro-batch, or with `no_grad` one of the log-prob passes without gradients
    (the whole batch, by algo.logprob_max_tokens when set)."""
    a = cfg.algo
    mini_rows = max(1, sizes.rows // a.mini_batches // max(cfg.workers.learners, 1))
    budget = a.max_tokens_per_microbatch
    if no_grad:
        mini_rows, budget = sizes.rows, a.logprob_max_tokens or budget
    if budget is None:
        rows = min(a.micro_batch_size, mini_rows)
    else:
        rows = min(mini_rows, max(1, budget // max(sizes.row_tokens, 1)))
    packed = a.pack_sequences and not a.compile_forward and shape.fused
    if packed and sizes.prompt > 0:
        groups = expected_groups(sizes.rows, sizes.groups, rows) if a.mini_batches == 1 else min(rows, sizes.groups)
        tokens = math.ceil(groups * sizes.prompt) + rows * sizes.response
    else:
        groups, tokens = rows, rows * sizes.row_tokens
    return MicroBatch(rows, groups, tokens, sizes.row_tokens, sizes.prompt, math.ceil(mini_rows / rows), packed)


def layer_bytes(cfg: Config, shape: ModelShape, micro: MicroBatch, native: bool, act_bytes: int, rebuilt: bool = False) -> int:
    """Bytes one decoder layer saves for the backward over `micro` (see the module docstring)."""
    h, q, kv, i, heads = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim, shape.intermediate, shape.heads
    if native:  # the C kernels read the packed tokens where they are: no padded layout
        return micro.tokens * layer_floats(shape, native=True, rebuilt=rebuilt) * act_bytes
    q_slots, k_slots, pairs = micro.attention_slots()
    scores = sdpa_materializes_scores(cfg, shape)
    per_key = 2 * q if scores else 2 * kv  # k and v, repeated to every query head by the math backend
    saved = micro.tokens * (6 * h + 4 * i) + q_slots * (2 * q + heads) + k_slots * per_key
    return saved * act_bytes + (heads * pairs * 4 if scores else 0)


def logprob_chunk_bytes(cfg: Config, shape: ModelShape, tokens: int, backward: bool) -> int:
    chunk = cfg.algo.logprob_chunk_tokens
    v, h = shape.vocab, shape.hidden
    if chunk is None:  # the whole logits: log-softmax, and its exp and product for the entropy (or their gradients)
        return 3 * tokens * v * 4
    chunk = min(chunk, tokens)
    return 2 * chunk * v * 4 + (2 * v * h * 4 if backward else 0)


def kv_bytes(shape: ModelShape, rows: int, groups: int, prompt: int, response: int, dtype: str, native: bool = False) -> int:
    """One engine batch's cache (rows <= MAX_BATCH_SIZE), with the shared-prompt layout when it applies
    (the engine's own estimates, reinforge.engines.kv_cache)."""
    if shape.fused and groups < rows and prompt >= min_shared_prompt(native):
        return shared_prompt_kv_cache_bytes(shape.config, groups, math.ceil(rows / groups), prompt, response, dtype)
    return kv_cache_bytes(shape.config, rows, prompt + response, dtype)


def sampling_bytes(shape: ModelShape, rows: int, prefill_rows: int, prompt: int, dtype_bytes: int) -> int:
    """Decode transients (logits and the sampler's softmax over [rows, V], float32) and the prefill's:
    one layer's projections over the prompts' tokens, and SDPA's [rows, heads, P, P] scores."""
    q, kv, i, h = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim, shape.intermediate, shape.hidden
    decode = 4 * rows * shape.vocab * 4
    prefill = prefill_rows * prompt * (q + 2 * kv + 3 * i + 3 * h + q) * dtype_bytes + prefill_rows * shape.heads * prompt * prompt * 4
    return decode + prefill


def predict(cfg: Config, shape: ModelShape, prompt_tokens: int, critic_shape: ModelShape | None = None, policies: int = 1) -> MemoryEstimate:
    """The memory of one steady-state RL step of `cfg` on a model of `shape`, whose longest prompt
    has `prompt_tokens` tokens. Bytes on the CPU (model.device=cpu, runtime included) or on the GPU."""
    a, r = cfg.algo, cfg.rollout
    on_gpu = cfg.model.device.startswith("cuda")
    lora = cfg.model.lora
    p = shape.params
    trainable = shape.lora_params(lora) if lora is not None else p
    engine_bytes = 2 if r.engine_dtype == "bfloat16" else 4
    sizes = step_sizes(cfg, prompt_tokens)
    notes: dict[str, str] = {}

    resident = {"runtime": 0 if on_gpu else RUNTIME_BYTES, "weights": 4 * p, "AdamW state": 2 * 4 * trainable}
    if lora is not None:
        notes["AdamW state"] = f"LoRA r={lora.r}: {trainable:,} adapter weights"
    if (a.kl_coef > 0 or a.ace_alpha > 0) and lora is None:
        resident["reference model"] = 4 * p
    elif (a.kl_coef > 0 or a.ace_alpha > 0) and a.ref_reset_every:  # LoRA: a copy of the adapters at each reset
        resident["reference adapters"] = 4 * trainable
    sampling_copy = 0  # a weight copy held only while sampling (rollout, evaluation)
    # a sharded rank 0's in-process engine samples the model's own weights (engines/borrowed_decoder),
    # a LoRA model's adapters unmerged (engines/borrowed_weights): no copy, and nothing merged at a sync
    borrowed = (
        cfg.engine.type != "vllm" and cfg.workers.workers == 0 and cfg.workers.sharding == "fsdp"
        and r.engine_dtype == "float32" and shape.fused
    )
    if cfg.engine.type == "vllm" and cfg.workers.workers == 0:  # (with Ray workers vLLM runs in them)
        resident["engine copy"] = engine_bytes * p + (0 if on_gpu else int(cfg.engine.kv_cache_gib * GIB))
        notes["engine copy"] = f"vLLM's weights and engine.kv_cache_gib={cfg.engine.kv_cache_gib}"
        if cfg.trainer.schedule == "async":  # the snapshots waiting, and the producer's and evaluation's sets the engine switches between
            resident["async producer"] = (cfg.trainer.max_staleness + 3) * 4 * p
    elif cfg.workers.workers == 0:
        fused_copy = 0 if borrowed or not shape.fused else engine_bytes * p
        if cfg.trainer.schedule == "sync":  # released after each rollout (TorchEngine.release_memory)
            sampling_copy = fused_copy
        else:
            resident["engine copy"] = fused_copy
        if lora is not None and not borrowed:  # the plain model the engine samples from (lora.inference_copy)
            resident["engine copy"] = resident.get("engine copy", 0) + 4 * p
        if cfg.trainer.schedule == "async":  # the producer's own model, its engine, and the weight snapshots waiting for it
            resident["async producer"] = 4 * p + engine_bytes * p + (cfg.trainer.max_staleness + 1) * 4 * p
    if cfg.critic.enabled:
        c = critic_shape or shape
        resident["critic"] = 4 * 4 * c.params
    if cfg.workers.learners > 1 and not on_gpu:  # followers on this machine: the learner's state each
        resident["other learner processes"] = (cfg.workers.learners - 1) * (RUNTIME_BYTES + 4 * p + 3 * 4 * trainable)
    if a.bf16_autocast:  # autocast caches a bf16 copy of every weight it casts, for the forward's duration
        resident["bf16 weight casts"] = 2 * p

    gradients = 4 * trainable
    native, native_decode = uses_native_kernels(cfg), uses_native_decode(cfg)
    act_bytes = 2 if a.bf16_autocast else 4
    micro = micro_batch(cfg, sizes, shape)
    tokens = micro.tokens
    per_layer = layer_bytes(cfg, shape, micro, native, act_bytes)
    outside_layers = tokens * 4 * shape.hidden * 4  # the embedding, the final norm and the hidden states the log-probs read
    if a.activation_checkpointing:  # the layer rebuilt at a time keeps everything (no rebuilt norms under checkpoint)
        activations = tokens * shape.layers * shape.hidden * 4 + per_layer + outside_layers
        notes["activations"] = f"checkpointed: {shape.layers} layer inputs + one layer, {tokens:,} tokens per micro-batch"
    else:
        activations = shape.layers * layer_bytes(cfg, shape, micro, native, act_bytes, rebuilt=True) + outside_layers
        notes["activations"] = f"{shape.layers} layers x {tokens:,} tokens per micro-batch"
    update = {"activations": activations, "log-prob chunks": logprob_chunk_bytes(cfg, shape, tokens, backward=True)}
    if not on_gpu and not a.activation_checkpointing:  # glibc's heap: see the module docstring, 'Heap fragmentation'
        update["heap fragmentation"] = shape.layers * tokens * shape.intermediate * act_bytes
    if micro.count > 1 or a.activation_checkpointing:  # kept from the last step (see 'Checkpointing' above)
        update["gradients"] = gradients
    if cfg.trainer.schedule == "async":  # the producer samples the next batch during the update
        update["KV cache"] = kv_bytes(shape, min(sizes.rows, MAX_BATCH_SIZE), sizes.groups, sizes.prompt, sizes.response, r.engine_dtype, native_decode)

    engine_rows = min(sizes.rows, MAX_BATCH_SIZE)
    engine_groups = max(1, math.ceil(engine_rows / r.group_size))
    kv = kv_bytes(shape, engine_rows, engine_groups, sizes.prompt, sizes.response, r.engine_dtype, native_decode)
    notes["KV cache"] = f"{engine_rows} rows x {sizes.prompt} + {sizes.response} tokens"
    phases = {
        "rollout": {
            "gradients": gradients, "KV cache": kv, "sampling": sampling_bytes(shape, engine_rows, engine_groups, sizes.prompt, engine_bytes),
            "engine copy": sampling_copy,
        },
        "update": update,
        "optimizer step": {"gradients": gradients, "optimizer temporaries": 4 * (trainable if on_gpu else min(shape.largest_param, trainable))},
    }
    h, i = shape.hidden, shape.intermediate
    no_grad = micro_batch(cfg, sizes, shape, no_grad=True)
    one_layer = no_grad.tokens * (3 * h + 2 * i + shape.heads * shape.head_dim + 2 * shape.kv_heads * shape.head_dim) * act_bytes
    if sdpa_materializes_scores(cfg, shape):  # the math backend's scores and probabilities, one layer at a time
        one_layer += 2 * shape.heads * no_grad.attention_slots()[2] * 4
    phases["no-grad forward"] = {
        "gradients": gradients, "activations": one_layer, "log-prob chunks": logprob_chunk_bytes(cfg, shape, no_grad.tokens, backward=False),
    }

    eval_rows = min(cfg.task.eval_size * max(cfg.eval.samples, 1), MAX_BATCH_SIZE)
    eval_new = cfg.eval.max_new_tokens or r.max_new_tokens
    eval_groups = max(1, math.ceil(eval_rows / max(cfg.eval.samples, 1)))
    eval_response = sizes.response * eval_new // max(r.max_new_tokens, 1)
    phases["evaluation"] = {
        "gradients": gradients,
        "KV cache": kv_bytes(shape, eval_rows, eval_groups, sizes.prompt, eval_response, r.engine_dtype, native_decode),
        "sampling": sampling_bytes(shape, eval_rows, eval_groups, sizes.prompt, engine_bytes),
        "engine copy": sampling_copy,
    }
    if lora is not None and not borrowed:
        phases["weight sync"] = {"gradients": gradients, "merged LoRA weights": 4 * shape.lora_targeted(lora)}
    if cfg.critic.enabled:
        c = critic_shape or shape
        phases["critic update"] = {"activations": c.layers * layer_bytes(cfg, c, micro, native, act_bytes) + tokens * 4 * c.hidden * 4}
    if policies > 1:
        resident = {name: size * (policies if name != "runtime" else 1) for name, size in resident.items()}
        notes["weights"] = f"{policies} policies"
    return MemoryEstimate(resident, phases, notes)



def estimate_run(cfg: Config, model_dir: Path | None, prompt_tokens: int) -> MemoryEstimate:
    """`predict` for the run `cfg` describes: its model (model_dir's config.json, or the tiny Llama
    of model.preset), its critic and its number of policies."""
    shape, critic, policies = run_shapes(cfg, model_dir)
    return predict(cfg, shape, prompt_tokens, critic, policies)
