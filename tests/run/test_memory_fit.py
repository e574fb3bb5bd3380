"""The memory-fit preflight (reinforge.run.memory_fit): the formula on a hand-computed tiny config,
the activation count against what autograd really saves, and the refusal, before any weights load."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from reinforge.config import ConfigError, load_config
from reinforge.engines.kv_cache import kv_cache_bytes, shared_prompt_kv_cache_bytes
from reinforge.learner.logprobs import token_logprobs
from reinforge.run import memory_check, memory_fit
from reinforge.run.memory_check import Available
from reinforge.run.memory_fit import RUNTIME_BYTES, layer_floats, predict
from reinforge.run.model_shape import model_shape
from reinforge.run.preflight import preflight

# vocab 100, hidden 16, 2 layers, 4 query heads and 2 key/value heads of 4, MLP 32, tied embeddings
TINY = dict(
    vocab_size=100, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=4, tie_word_embeddings=True,
)


def tiny_config(**overrides) -> LlamaConfig:
    return LlamaConfig(**{**TINY, **overrides})


def test_shape_counts_weights_of_the_architecture() -> None:
    shape = model_shape(tiny_config())
    # embedding 100 x 16 (tied: once); per layer q 16x16, k and v 16x8, o 16x16, MLP 3 x 16x32, two norms of 16
    per_layer = 256 + 128 + 128 + 256 + 3 * 512 + 2 * 16
    assert shape.params == 1600 + 2 * per_layer + 16 == 6288
    assert (shape.layers, shape.heads, shape.kv_heads, shape.head_dim, shape.intermediate) == (2, 4, 2, 4, 32)
    assert model_shape(tiny_config(tie_word_embeddings=False)).params == 6288 + 1600  # a separate lm_head


def test_prediction_of_a_tiny_config_by_hand() -> None:
    """2 prompts x 2 samples, prompts of 4 tokens, 6 new tokens, KL on (a reference), one CPU thread."""
    overrides = [
        "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=6", "algo.kl_coef=0.1",
        "task.eval_size=1", "eval.samples=1",
    ]
    estimate = predict(load_config("default", overrides), model_shape(tiny_config()), prompt_tokens=4)
    p = 6288
    assert estimate.resident == {
        "runtime": RUNTIME_BYTES, "weights": 4 * p, "AdamW state": 8 * p, "reference model": 4 * p,
    }  # the engine's copy is released after each rollout (the sync schedule): a term of sampling's phases
    # update: one micro-batch of all 4 rows, packed: 2 groups' prompts once + 4 responses = 2 x 4 + 4 x 6 = 32 tokens;
    # per layer and token (C kernels) 4 x 16 + 2 x 16 + 2 x 8 + 3 x 32 + 4 heads = 212 numbers, of which the norms'
    # outputs and SiLU(gate) x up (2 x 16 + 32) are rebuilt in the backward: 148 kept; + 4 x 16 outside the layers
    assert layer_floats(model_shape(tiny_config()), native=True) == 212
    assert layer_floats(model_shape(tiny_config()), native=True, rebuilt=True) == 148
    assert estimate.phases["update"] == {
        "activations": 32 * (2 * 148 * 4 + 4 * 16 * 4),
        # the log-prob chunk (32 tokens < 1024): two [32, 100] float32 buffers, the [100, 16] output gradient and its product
        "log-prob chunks": 2 * 32 * 100 * 4 + 2 * 100 * 16 * 4,
        "heap fragmentation": 2 * 32 * 32 * 4,  # a [32 tokens, 32] float32 block per layer
    }
    # rollout: 4 rows x (4 + 6) slots, 2 layers x (keys, values) x 2 kv heads x 4 dims, float32 (a prompt under 32
    # tokens is not shared); the gradients of the last update are still there
    assert estimate.phases["rollout"]["KV cache"] == 2 * 2 * 4 * 10 * 2 * 4 * 4 == 5120
    assert estimate.phases["rollout"]["gradients"] == 4 * p
    assert estimate.phases["rollout"]["engine copy"] == estimate.phases["evaluation"]["engine copy"] == 4 * p
    assert estimate.peak_phase == "update"
    assert estimate.peak == RUNTIME_BYTES + 16 * p + 46080 + 38400 + 8192
    held = predict(load_config("default", [*overrides, "trainer.schedule=async"]), model_shape(tiny_config()), prompt_tokens=4)
    assert held.resident["engine copy"] == 4 * p  # the async producer's engine samples during the update
    # on vLLM the producer's lane keeps no model: the snapshots waiting (k + 1) and the two sets the engine switches between
    on_vllm = predict(
        load_config("default", [*overrides, "trainer.schedule=async", "trainer.max_staleness=2", "algo.tis_cap=2", "engine.type=vllm"]),
        model_shape(tiny_config()), prompt_tokens=4,
    )
    assert on_vllm.resident["async producer"] == (2 + 1 + 2) * 4 * p


def test_a_sharded_rank_0s_engine_samples_the_model_without_a_copy() -> None:
    """workers.sharding=fsdp: the engine borrows the loop model's weights (engines/borrowed_decoder);
    in another dtype than the model's it still casts a copy."""
    base = ["rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=6", "workers.learners=2"]
    p = 6288

    def copy_bytes(*overrides: str) -> int:
        return predict(load_config("default", [*base, *overrides]), model_shape(tiny_config()), prompt_tokens=4).phases["rollout"]["engine copy"]

    assert copy_bytes() == 4 * p
    assert copy_bytes("workers.sharding=fsdp") == 0
    assert copy_bytes("workers.sharding=fsdp", "rollout.engine_dtype=bfloat16") == 2 * p

    def resident_copy(*overrides: str) -> int:  # a LoRA policy's merged copy, held for the run
        return predict(load_config("default", [*base, "model.lora.r=2", *overrides]), model_shape(tiny_config()), prompt_tokens=4).resident.get("engine copy", 0)

    assert resident_copy() == 4 * p
    assert resident_copy("workers.sharding=fsdp") == 0  # the adapters read unmerged (engines/borrowed_weights)


def test_the_no_grad_passes_are_counted_at_their_own_budget() -> None:
    """algo.logprob_max_tokens: the reference's pass holds one layer's transients and a log-prob
    chunk over its own micro-batch; the update's terms do not move."""
    base = ["rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=6", "algo.kl_coef=0.1",
            "algo.max_tokens_per_microbatch=10", "algo.logprob_chunk_tokens=4096"]
    shape = model_shape(tiny_config())

    def phases(*overrides: str) -> dict:
        return predict(load_config("default", [*base, *overrides]), shape, prompt_tokens=4).phases

    small, large = phases(), phases("algo.logprob_max_tokens=40")
    assert small["update"] == large["update"]
    # one row of 10 tokens per micro-batch, or all 4 rows: 2 groups' prompts once + 4 x 6 = 32 packed tokens;
    # one layer's transients: 3 x 16 + 2 x 32 + 16 + 2 x 8 = 144 floats a token; the chunk: two [tokens, 100] buffers
    assert small["no-grad forward"]["activations"] == 10 * 144 * 4 and large["no-grad forward"]["activations"] == 32 * 144 * 4
    assert large["no-grad forward"]["log-prob chunks"] == 2 * 32 * 100 * 4


def test_shared_prompts_use_the_engines_layout() -> None:
    """Prompts of 32+ tokens with torch's decode attention, 128+ with the C one: cached once per
    group (prefill_shared), at the peak the engine's own estimate gives
    (reinforge.engines.kv_cache.shared_prompt_kv_cache_bytes, tested against the engine's
    allocations in tests/engines/test_kv_cache.py); shorter ones once per row."""
    shape = model_shape(tiny_config())
    sizes = ["rollout.prompts_per_step=3", "rollout.group_size=4", "rollout.max_new_tokens=8", "trainer.threads=1"]
    for kernels, prompt, shared in (("torch", 40, True), ("native", 40, False), ("native", 130, True)):
        cfg = load_config("default", [*sizes, f"engine.decode_kernels={kernels}"])
        estimate = predict(cfg, shape, prompt_tokens=prompt)
        expected = shared_prompt_kv_cache_bytes(shape.config, 3, 4, prompt, 8) if shared else kv_cache_bytes(shape.config, 12, prompt + 8)
        assert estimate.phases["rollout"]["KV cache"] == expected, (kernels, prompt)


def test_lora_counts_adapters_only_and_no_reference_copy() -> None:
    cfg = load_config("default", ["algo.kl_coef=0.1", "model.lora.r=2"])
    shape = model_shape(tiny_config())
    estimate = predict(cfg, shape, prompt_tokens=4)
    # r x (in + out) for q, k, v, o, gate, up, down of each of the 2 layers
    adapters = 2 * 2 * ((16 + 16) + 2 * (16 + 8) + (16 + 16) + 2 * (16 + 32) + (32 + 16))
    assert estimate.resident["AdamW state"] == 8 * adapters
    assert "reference model" not in estimate.resident
    assert estimate.resident["engine copy"] == 4 * 6288  # the plain model LoRA samples from (the decoder's copy: rollout only)


def test_the_update_counts_the_kept_gradients_under_checkpointing_and_heap_fragmentation_without() -> None:
    """Under checkpointing the update holds each layer's input, one recomputed layer and the
    gradients, which the learner keeps allocated between steps (reinforge.learner.policy_learner);
    without it, one micro-batch's update holds no gradients (freed at the step's start), and on a
    CPU the heap's stranded blocks (see reinforge.run.memory_fit)."""
    small = ["rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=6"]
    shape = model_shape(tiny_config())

    def update(*overrides: str) -> dict[str, int]:
        return predict(load_config("default", [*small, *overrides]), shape, prompt_tokens=4).phases["update"]

    # one layer 32 tokens x 212 floats x 4 bytes; checkpointing keeps 2 layer inputs of 32 x 16 floats and one layer
    layer = 32 * 212 * 4
    checkpointed = update("algo.activation_checkpointing=true")
    assert checkpointed["activations"] == 32 * 2 * 16 * 4 + layer + 32 * 4 * 16 * 4
    assert checkpointed["gradients"] == update("algo.activation_checkpointing=true", "model.device=cuda")["gradients"] == 4 * shape.params
    assert "gradients" not in update()
    # glibc's heap: up to one [tokens, I] block per layer beside the saved tensors, on a CPU without checkpointing
    assert update()["heap fragmentation"] == 2 * 32 * 32 * 4
    assert "heap fragmentation" not in checkpointed
    assert "heap fragmentation" not in update("model.device=cuda")
    assert update("algo.activation_checkpointing=true", "model.lora.r=2")["gradients"] == 4 * shape.lora_params(load_config("default", ["model.lora.r=2"]).model.lora)


@pytest.mark.parametrize("kernels", ["native", "torch"])
def test_activation_count_is_what_autograd_saves(kernels: str) -> None:
    """layer_floats against the tensors a layer's packed forward saves for backward (weights left out),
    counted with saved_tensors_hooks: the difference between 3 layers and 1, per token."""
    torch.manual_seed(0)

    def saved_bytes(layers: int) -> int:
        model = LlamaForCausalLM(tiny_config(num_hidden_layers=layers, vocab_size=64))
        weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
        seen: dict[int, int] = {}

        def keep(t: torch.Tensor) -> torch.Tensor:
            storage = t.untyped_storage()
            if storage.data_ptr() not in weights:
                seen[storage.data_ptr()] = storage.nbytes()
            return t

        ids = torch.randint(3, 64, (4, 24), generator=torch.Generator().manual_seed(1))  # distinct rows: 96 tokens
        with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
            token_logprobs(model, ids, torch.ones_like(ids), pack=True, packed_kernels=kernels)
        return sum(seen.values())

    per_token = (saved_bytes(3) - saved_bytes(1)) / 2 / 96
    expected = layer_floats(model_shape(tiny_config()), native=kernels == "native", rebuilt=True) * 4
    assert per_token == pytest.approx(expected, rel=0.05)


@pytest.fixture
def weightless_model_dir(tmp_path: Path, tokenizer) -> Path:
    """SmolLM2-135M's config.json and a tokenizer, with a 'weights' file that is not one: any attempt
    to load the model fails with another error than the memory check's."""
    directory = tmp_path / "model"
    directory.mkdir()
    config = LlamaConfig(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
        num_key_value_heads=3, head_dim=64, tie_word_embeddings=True, max_position_embeddings=8192,
    )
    config.architectures = ["LlamaForCausalLM"]
    (directory / "config.json").write_text(json.dumps(config.to_dict()))
    (directory / "model.safetensors").write_bytes(b"not weights")
    tokenizer.save_pretrained(directory)
    return directory


def test_run_that_cannot_fit_is_refused_with_numbers_and_knobs(weightless_model_dir: Path, monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(memory_check, "available_memory", lambda device: Available(5 << 30, "a test's 5 GiB"))
    cfg = load_config("default", [
        f"model.path={weightless_model_dir}", "rollout.prompts_per_step=8", "rollout.group_size=4",
        "rollout.max_new_tokens=128", "algo.kl_coef=0.04", "task.eval_size=4",
    ])
    with pytest.raises(ConfigError) as err:
        preflight(cfg)
    message = str(err.value)
    estimate = memory_fit.estimate_run(cfg, weightless_model_dir, 1)
    assert f"needs at least {estimate.peak / 2**30:.2f} GiB" in message and "5.00 GiB it can use (a test's 5 GiB)" in message
    assert estimate.peak > 5 << 30
    for term in ("activations", "AdamW state", "reference model", "log-prob chunks", "weights"):
        assert term in message
    for knob in ("algo.max_tokens_per_microbatch=", "algo.activation_checkpointing=true", "model.lora.r=8",
                 "rollout.engine_dtype=bfloat16", "rollout.prompts_per_step=4", "rollout.max_new_tokens=64", "trainer.memory_check=false"):
        assert knob in message
    # each knob with the peak it would give; the token budget named is the largest that fits
    budget = int(re.search(r"algo\.max_tokens_per_microbatch=(\d+) -> [\d.]+ GiB \(fits\)", message).group(1))
    assert memory_fit.estimate_run(memory_check.with_setting(cfg, "algo.max_tokens_per_microbatch", budget), weightless_model_dir, 1).peak <= 5 << 30
    assert memory_fit.estimate_run(memory_check.with_setting(cfg, "algo.max_tokens_per_microbatch", 2 * budget), weightless_model_dir, 1).peak > 5 << 30


def test_memory_check_false_skips_it(weightless_model_dir: Path, monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(memory_check, "available_memory", lambda device: Available(1 << 20, "1 MiB"))
    preflight(load_config("default", [f"model.path={weightless_model_dir}", "trainer.memory_check=false"]))


def test_a_run_that_fits_prints_its_prediction(monkeypatch, tmp_path, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(memory_check, "available_memory", lambda device: Available(64 << 30, "64 GiB"))
    preflight(load_config("default", []))
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("memory:")]
    assert len(lines) == 1 and "predicted to take at least" in lines[0] and "64.00 GiB available" in lines[0]


def test_available_memory_of_this_machine() -> None:
    available = memory_check.available_memory("cpu")
    total = int(Path("/proc/meminfo").read_text().split()[1]) * 1024
    assert 0 < available.bytes <= total + RUNTIME_BYTES


def test_prompts_count_at_least_their_chat_template(tokenizer, tmp_path) -> None:
    """Before the tasks are tokenized, a chat prompt has at least the template around the system
    prompt and instruction; a raw one at least a token."""
    chat = load_config("default", ["rollout.prompt_format=chat"])
    bare = len(tokenizer.apply_chat_template([{"role": "user", "content": ""}], add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"])
    assert memory_check.prompt_lower_bound(chat, tokenizer) == bare > 1
    system = load_config("default", ["rollout.prompt_format=chat", "task.system_prompt=Add the two numbers and write only the sum."])
    assert memory_check.prompt_lower_bound(system, tokenizer) > bare
    assert memory_check.prompt_lower_bound(load_config("default", ["rollout.prompt_format=raw"]), tokenizer) == 1


def test_a_containers_limit_caps_what_is_available(monkeypatch, tmp_path) -> None:
    """cgroup v2: limit - (usage - inactive page cache), when lower than the machine's."""
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "memory.max").write_text(f"{2 << 30}\n")
    (root / "memory.current").write_text(f"{1 << 30}\n")
    (root / "memory.stat").write_text(f"anon 123\ninactive_file {256 << 20}\n")
    real_path = memory_check.Path
    monkeypatch.setattr(memory_check, "Path", lambda p: root if p == "/sys/fs/cgroup" else real_path(p))
    assert memory_check.cgroup_available() == (2 << 30) - (1 << 30) + (256 << 20)
    available = memory_check.available_memory("cpu")
    assert available.bytes <= (2 << 30) - (1 << 30) + (256 << 20) + RUNTIME_BYTES and "cgroup" in available.where
    (root / "memory.max").write_text("max\n")
    assert memory_check.cgroup_available() is None
