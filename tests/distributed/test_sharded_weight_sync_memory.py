"""A sharded learner's rank 0 holds one full copy of the policy's weights through a weight sync:
the loop's model, which the in-process engine samples without a copy of its own
(reinforge.engines.borrowed_decoder), and, while the update is gathered into it, one parameter at
a time (reinforge.distributed.fsdp.gather_full_weights)."""

from __future__ import annotations

import copy
import math
import weakref

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.tensor import DTensor

from deadlines import PROCESS_START_S
from reinforge.config import LoraConfig
from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.learner.policy_objective import make_policy_objective
from reinforge.models.lora import apply_lora
from reinforge.models.tiny_llama import build_tiny_llama
from float_bounds import forward_bound
from tensor_storages import storages
from test_ddp import LR, MAX_RESPONSE, algo_for, make_batch, make_tokenizer

WORLD = 2


class FullWeightLedger:
    """The bytes of full-size policy weights alive on rank 0, at their most: the storages of the
    loop model's parameters, of every weight the engine's decoder holds, and of every parameter
    the gather has all-gathered and not yet freed (counted each time one is gathered and after
    each rollout)."""

    def __init__(self, model, engine):
        self.model, self.engine, self.gathered, self.peak = model, engine, [], 0

    def count(self) -> None:
        found = storages(list(self.model.parameters()))
        decoder = self.engine._decoder
        if decoder is not None:
            found.update(storages([decoder.layers, decoder.final_norm, decoder.lm_head, decoder.embed]))
        for ref in self.gathered:
            if (tensor := ref()) is not None:
                found.update(storages(tensor))
        self.peak = max(self.peak, sum(found.values()))


def padded_bytes(param: torch.Tensor) -> int:
    """A parameter all-gathered from dim-0 shards: its rows rounded up to a multiple of the ranks."""
    rows = math.ceil(param.shape[0] / WORLD) * WORLD
    return rows * math.prod(param.shape[1:]) * param.element_size()


def rank_0(index: int, path: str, lora: bool = False) -> None:
    """Rank 0 in a process of its own (its group's sockets stay out of pytest's process): a learner
    group on the loop's model, a borrowing and a copying engine over that model, one step."""
    from reinforge.distributed.learner_group import STEP, FollowerSpec, LearnerGroup

    torch.set_num_threads(1)
    tokenizer = make_tokenizer()
    batch = make_batch(len(tokenizer), tokenizer.pad_token_id)
    algo = algo_for("token_mean")
    model = build_tiny_llama(tokenizer, "nano", seed=0)
    adapters = LoraConfig(r=4) if lora else None
    if lora:  # rank 0's engine reads the adapters unmerged (engines/borrowed_weights); the copying one merges a copy
        model = apply_lora(model, adapters)
    prompts = [tokenizer(text).input_ids for text in ("12+34=", "5+678=", "90+1=")]
    params = SamplingParams(max_new_tokens=MAX_RESPONSE, temperature=1.0)
    spec = FollowerSpec(model.config, dict(lr=LR, micro_batch_size=2, max_response_tokens=MAX_RESPONSE), algo, threads=1, timeout_s=PROCESS_START_S, sharding="fsdp", lora=adapters)
    engines = {kind: TorchEngine(model, tokenizer.pad_token_id, borrow_weights=kind == "borrowing") for kind in ("borrowing", "copying")}
    ledgers = {kind: FullWeightLedger(model, engine) for kind, engine in engines.items()}
    original = DTensor.full_tensor

    def gathered(self, *args, **kwargs):
        full = original(self, *args, **kwargs)
        for ledger in ledgers.values():
            ledger.gathered.append(weakref.ref(full))
            ledger.count()
        return full

    group = LearnerGroup(WORLD, spec, model)
    messages = []
    broadcast = dist.broadcast_object_list

    def recorded(objects, *args, **kwargs):
        messages.extend(objects)
        return broadcast(objects, *args, **kwargs)

    try:
        with torch.no_grad():  # as a resumed run loads a checkpoint into the loop's model after the group formed
            for param in model.parameters():
                param.add_(0.5)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        for kind, engine in engines.items():
            engine.generate(prompts, params, seed=0)
            ledgers[kind].count()
            engine.release_memory()  # after a rollout, as the sync schedule does
        DTensor.full_tensor, dist.broadcast_object_list = gathered, recorded
        try:
            group.learner.train_step(batch, make_policy_objective(algo))
        finally:
            DTensor.full_tensor, dist.broadcast_object_list = original, broadcast
        samples = {}
        for kind, engine in engines.items():
            engine.sync_weights(group.learner.version)
            samples[kind] = engine.generate(prompts, params, seed=1)
            ledgers[kind].count()
        decoder = engines["borrowing"]._decoder
        borrowed = set(storages([decoder.layers, decoder.lm_head, decoder.embed])) <= {p.untyped_storage().data_ptr() for p in model.parameters()}
        gathers = len(ledgers["borrowing"].gathered)
    finally:
        group.close()
    # The synced weights as a fresh engine over a copy of the model samples them (the old, copying path).
    reference = TorchEngine(copy.deepcopy(model), tokenizer.pad_token_id).generate(prompts, params, seed=1)
    torch.save(dict(
        peaks={kind: ledger.peak for kind, ledger in ledgers.items()},
        model_bytes=sum(p.numel() * p.element_size() for p in model.parameters()),
        base_bytes=sum(p.numel() * p.element_size() for name, p in model.named_parameters() if "lora_" not in name),
        largest=max(padded_bytes(p) for p in model.parameters()),
        trained=sum(1 for p in model.parameters() if p.requires_grad),
        gathers=gathers,
        borrowed=borrowed,
        moved=max((model.state_dict()[k] - v).abs().max().item() for k, v in before.items()),
        tokens={kind: [g.token_ids for g in gens] for kind, gens in {**samples, "reference": reference}.items()},
        logprob_gap=max(abs(a - b) for x, y in zip(samples["borrowing"], reference) for a, b in zip(x.logprobs, y.logprobs)),
        bound=forward_bound(model, 20.0),
        version=group.learner.version,
        # the learner group's messages (kind, policy, batch, state); the others are the weights' shapes
        sent_weights=[m[3]["model"] is not None for m in messages if isinstance(m, tuple) and m[0] == STEP and m[3] is not None],
    ), path)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_rank_0_holds_one_full_copy_through_a_sharded_weight_sync(tmp_path, lora: bool) -> None:
    """Through a rollout, a sharded step whose weights are gathered into the loop's model, the
    sync and the next rollout, rank 0's full-size policy weights never exceed one full copy plus
    one gathered parameter; the engine that copied its weights (before) held two copies, which the
    same count sees. The synced engine samples the learner's new weights: the same tokens as an
    engine over a copy of them, log-probs within float32 bounds. With LoRA adapters (the copying
    engine samples a merged copy; the borrowing one reads the adapters unmerged) the same."""
    if lora:
        pytest.importorskip("peft")
    path = tmp_path / "rank0.pt"
    process = mp.spawn(rank_0, args=(str(path), lora), nprocs=1, join=False)
    try:
        assert process.join(timeout=PROCESS_START_S), "rank 0 did not finish"
    finally:
        for child in process.processes:
            if child.is_alive():
                child.kill()
    out = torch.load(path, weights_only=False)
    assert out["gathers"] >= out["trained"], "the ledger saw every parameter gathered"
    assert out["moved"] > LR / 2 and out["version"] == 1, "the step changed the loop's model"
    # Rank 0's weights (changed after the group formed) reached the other rank tensor by tensor,
    # not in the first step's message: the step started from them (Adam moves a weight ~LR a step,
    # far less than the 0.5 they were shifted by).
    assert out["sent_weights"] == [False]
    assert out["moved"] < 10 * LR
    one_copy = out["model_bytes"] + out["largest"]
    assert out["peaks"]["borrowing"] <= one_copy, out["peaks"]
    assert out["peaks"]["copying"] >= out["model_bytes"] + out["base_bytes"], out["peaks"]  # the count sees a second copy
    assert out["borrowed"], "the borrowing engine's decoder reads the model's own storages"
    assert out["tokens"]["borrowing"] == out["tokens"]["reference"] == out["tokens"]["copying"]
    assert out["logprob_gap"] < out["bound"]
