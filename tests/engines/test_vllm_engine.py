"""VllmEngine against the Engine contract and against our learner and TorchEngine (marker `vllm`).

Needs the extra (`pip install 'reinforge[vllm]'`, in a venv of its own: docs/scaling.md, "vLLM"); run with
`python -m pytest -q -m vllm tests/engines/test_vllm_engine.py`. One vLLM start takes about a
minute on 2 cores, so one engine serves the tests of this module (in this order: the weight-sync
test changes its weights last), and the tests that need another start are few.

The model is `micro` (vLLM's CPU attention has no kernel for nano's head dimension 16) with
large random weights (`sharpen_`), so distributions are peaked and prompt-dependent and a wrong
token, position or temperature moves log-probs far above float noise.
"""

from __future__ import annotations

import copy
import multiprocessing
import os
import signal

import pytest
import torch

from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.engines.vllm_engine import VllmEngine, VllmEngineError, unsupported_model_reason, vllm_available
from reinforge.learner.logprobs import token_logprobs
from reinforge.models.tiny_llama import build_tiny_llama
from tests.conftest import sharpen_
from tests.float_bounds import forward_bound

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed: pip install 'reinforge[vllm]' (docs/scaling.md, 'vLLM')"),
]


@pytest.fixture(scope="module")
def policy(tokenizer):
    return sharpen_(build_tiny_llama(tokenizer, "micro", seed=0)).eval()


@pytest.fixture(scope="module")
def engine(policy, tokenizer):
    with VllmEngine(policy, tokenizer.pad_token_id, kv_cache_gib=1, startup_timeout_s=900, timeout_s=600) as started:
        yield started


def learner_logprobs_and_scale(model, prompt: list[int], completion: list[int], temperature: float) -> tuple[torch.Tensor, float]:
    """The learner's log-probs of `completion` after `prompt`, and the largest |logit / T| they come from."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        lp, _ = token_logprobs(model, ids, torch.ones_like(ids), temperature=temperature)
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1] / temperature
    return lp[0, len(prompt) - 1 :], logits.abs().max().item()


def assert_learner_agrees(model, prompts, generations, temperature: float) -> None:
    """Each behaviour log-prob equals the learner's on the same tokens, within forward_bound: vLLM's
    kernels (fused q/k/v and gate/up matmuls, its own attention) are the same float32 math as
    `transformers`' in another summation order, and nothing else."""
    for prompt, g in zip(prompts, generations):
        assert len(g.token_ids) == len(g.logprobs) > 0
        mine, scale = learner_logprobs_and_scale(model, prompt, g.token_ids, temperature)
        gap = (mine - torch.tensor(g.logprobs)).abs().max().item()
        assert gap <= forward_bound(model, scale), (gap, forward_bound(model, scale))


def test_logprobs_are_the_learners_at_the_sampling_temperature(engine, policy, arithmetic_prompts) -> None:
    prompts = arithmetic_prompts * 2
    for temperature in (1.0, 0.7):
        gens = engine.generate(prompts, SamplingParams(max_new_tokens=8, temperature=temperature), seed=1)
        assert all(g.finish_reason == "length" and len(g.token_ids) == 8 for g in gens)
        assert_learner_agrees(policy, prompts, gens, temperature)


def test_greedy_equals_torch_engine(engine, policy, tokenizer, arithmetic_prompts) -> None:
    params = SamplingParams(max_new_tokens=8, temperature=0.0)
    ours = TorchEngine(policy, tokenizer.pad_token_id).generate(arithmetic_prompts, params)
    theirs = engine.generate(arithmetic_prompts, params)
    assert [g.token_ids for g in theirs] == [g.token_ids for g in ours]
    # greedy log-probs are log softmax(logits), temperature 1, in both engines
    assert_learner_agrees(policy, arithmetic_prompts, theirs, 1.0)


def test_stop_token_ends_the_row_and_is_kept(engine, arithmetic_prompts) -> None:
    free = engine.generate(arithmetic_prompts, SamplingParams(max_new_tokens=6, temperature=0.0))
    stop = free[0].token_ids[2]
    assert stop not in free[0].token_ids[:2]
    out = engine.generate(arithmetic_prompts, SamplingParams(max_new_tokens=6, temperature=0.0, stop_token_ids=(stop,)))
    for g, f in zip(out, free):
        if stop in f.token_ids:
            cut = f.token_ids.index(stop) + 1
            assert (g.token_ids, g.logprobs, g.finish_reason) == (f.token_ids[:cut], f.logprobs[:cut], "stop")
        else:
            assert (g.token_ids, g.finish_reason) == (f.token_ids, "length")
    assert out[0].token_ids == free[0].token_ids[:3] and out[0].token_ids[-1] == stop


def test_seeds_are_reproducible_and_rows_of_a_group_differ(engine, arithmetic_prompts) -> None:
    group = [arithmetic_prompts[2]] * 8
    params = SamplingParams(max_new_tokens=8, temperature=1.0)
    first = engine.generate(group, params, seed=5)
    again = engine.generate(group, params, seed=5)
    other = engine.generate(group, params, seed=6)
    assert [g.token_ids for g in first] == [g.token_ids for g in again]
    assert [g.logprobs for g in first] == [g.logprobs for g in again]
    assert len({tuple(g.token_ids) for g in first}) > 1  # each row its own seed
    assert [g.token_ids for g in other] != [g.token_ids for g in first]


def test_budgets_cap_each_row(engine, arithmetic_prompts) -> None:
    budgets = [1, 3, 8, 2, 5]
    out = engine.generate(arithmetic_prompts, SamplingParams(max_new_tokens=6, temperature=1.0), seed=0, budgets=budgets)
    assert [len(g.token_ids) for g in out] == [1, 3, 6, 2, 5]


def test_truncation_needs_an_engine_started_for_it(engine, arithmetic_prompts) -> None:
    with pytest.raises(VllmEngineError, match="truncation=True"):
        engine.generate(arithmetic_prompts, SamplingParams(top_k=5))


def test_weight_sync_changes_samples_and_is_verified(engine, policy, tokenizer, arithmetic_prompts, monkeypatch) -> None:
    greedy = SamplingParams(max_new_tokens=8, temperature=0.0)
    before = engine.generate(arithmetic_prompts, greedy)
    sharpen_(policy, seed=1)  # the learner's update: every weight changes
    engine.sync_weights(1)
    assert engine.policy_version == 1
    after = engine.generate(arithmetic_prompts, greedy)
    assert all(g.policy_version == 1 for g in after)
    assert [g.token_ids for g in after] != [g.token_ids for g in before]
    assert [g.token_ids for g in after] == [g.token_ids for g in TorchEngine(policy, tokenizer.pad_token_id).generate(arithmetic_prompts, greedy)]
    sampled = engine.generate(arithmetic_prompts, SamplingParams(max_new_tokens=8), seed=2)
    assert_learner_agrees(policy, arithmetic_prompts, sampled, 1.0)
    # the echo is checked: a learner-side checksum the engine cannot match is refused
    from reinforge.engines.weight_sync import WeightSyncError
    from reinforge.engines import vllm_engine

    monkeypatch.setattr(vllm_engine, "state_checksum", lambda state: "not-what-the-engine-received")
    with pytest.raises(WeightSyncError, match="echoed weights"):
        engine.sync_weights(2)


def test_a_sync_sends_one_tensor_per_message(engine, policy, monkeypatch) -> None:
    """Neither process holds the whole state pickled: the request, then one message per tensor."""
    sent = []
    real_send = engine._conn.send
    monkeypatch.setattr(engine._conn, "send", lambda message: (sent.append(message), real_send(message))[1])
    engine.sync_weights(5)
    state = policy.state_dict()
    assert sent[0] == ("load", (len(state), 5))
    assert [name for name, _ in sent[1:]] == list(state)
    assert all(torch.equal(tensor, state[name]) for name, tensor in sent[1:])
    # without lanes the model's own tensors go out (no host copy of the whole state), and none is kept after
    assert all(tensor.data_ptr() == state[name].data_ptr() for name, tensor in sent[1:])
    assert engine._mine.payload is None and engine._held.payload is None


def test_truncated_sampling_gives_the_untruncated_logprobs(tokenizer, arithmetic_prompts) -> None:
    """With top-k / top-p the engine runs vLLM's raw_logprobs mode: at T = 1 the sampled token's own
    log-prob, at another T the full vocabulary rescaled here; both before truncation."""
    model = sharpen_(build_tiny_llama(tokenizer, "micro", seed=0), seed=3).eval()
    with VllmEngine(model, tokenizer.pad_token_id, truncation=True, startup_timeout_s=900) as engine:
        for params in (SamplingParams(max_new_tokens=6, temperature=1.0, top_k=3), SamplingParams(max_new_tokens=6, temperature=0.7, top_p=0.8)):
            gens = engine.generate(arithmetic_prompts, params, seed=4)
            assert_learner_agrees(model, arithmetic_prompts, gens, params.temperature)
            # truncated log-probs would be larger (renormalized over fewer tokens): these are not
            assert any(lp < -1e-3 for g in gens for lp in g.logprobs)


def test_bad_inputs_fail_before_compute_or_stop_the_engine(tokenizer, nano_model) -> None:
    assert "head dimension 16" in unsupported_model_reason(nano_model.config.to_dict() | {"architectures": ["LlamaForCausalLM"]})
    assert "not in vLLM's model registry" in unsupported_model_reason({"architectures": ["NoSuchModelForCausalLM"]})
    with pytest.raises(VllmEngineError, match="cannot serve this model"):
        VllmEngine(copy.deepcopy(nano_model), tokenizer.pad_token_id)
    model = build_tiny_llama(tokenizer, "micro", seed=0).eval()
    running = set(multiprocessing.active_children())  # the module's engine, if started
    with pytest.raises(VllmEngineError, match=r"within 1 s \(engine.startup_timeout_s\); its process was killed"):
        VllmEngine(model, tokenizer.pad_token_id, startup_timeout_s=1)
    assert set(multiprocessing.active_children()) <= running  # the engine that timed out left no process
    broken = build_tiny_llama(tokenizer, "micro", seed=0).eval()
    broken.config.num_key_value_heads = 3  # passes the registry check; vLLM's attention cannot split 4 heads over 3
    with pytest.raises(VllmEngineError, match="vLLM failed during start-up"):
        VllmEngine(broken, tokenizer.pad_token_id, startup_timeout_s=900)
    assert set(multiprocessing.active_children()) <= running


def test_a_killed_engine_process_is_reported(engine) -> None:
    """Last: it kills the module's engine."""
    pid = engine.pid()
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(VllmEngineError, match="process (died|is gone)"):
        engine.generate([[1, 2]], SamplingParams(max_new_tokens=2))
    assert engine.pid() is None  # closed: nothing left running
