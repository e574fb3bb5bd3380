"""The first update of a sharded group sends rank 0's state without pickling it whole
(reinforge.distributed.fsdp.ShardedDriverSync): the message carries the version and the skeleton
of a loaded optimizer state; the weights and moments follow tensor by tensor (load_rank0_state).
That the ranks then take the same step as from a whole state: test_sharded_learner.py (plain
layout) and test_critic_group.py."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from reinforge.distributed.fsdp import ShardedDriverSync, TensorSlot, optimizer_skeleton

from packed_batches import small


def adamw_state(model) -> dict:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    optimizer.step()
    return optimizer.state_dict()


def test_the_skeleton_keeps_shapes_and_scalars_not_moments():
    model = small(LlamaForCausalLM, LlamaConfig)
    state = adamw_state(model)
    skeleton = optimizer_skeleton(state)
    assert skeleton["param_groups"] == state["param_groups"]
    for index, entry in state["state"].items():
        assert skeleton["state"][index]["exp_avg"] == TensorSlot(tuple(entry["exp_avg"].shape), torch.float32)
        assert skeleton["state"][index]["exp_avg_sq"] == TensorSlot(tuple(entry["exp_avg_sq"].shape), torch.float32)
        assert torch.equal(skeleton["state"][index]["step"], entry["step"])  # a 0-dim scalar rides along
    assert len(pickle.dumps(skeleton)) < len(pickle.dumps(state)) / 10


def test_the_message_holds_no_weights_and_rank_0_loads_the_real_state():
    model = small(LlamaForCausalLM, LlamaConfig)
    pending = adamw_state(model)
    loaded = []
    driver = SimpleNamespace(optimizer=SimpleNamespace(pending=pending), version=3, model=model, load_synced_state=loaded.append)
    message = ShardedDriverSync.synced_state(driver)
    assert message == {"model": None, "optimizer": optimizer_skeleton(pending), "version": 3}
    assert driver.optimizer.pending is None  # sent once
    ShardedDriverSync.state_sent(driver, message)
    (state,) = loaded
    assert state["optimizer"] is pending and state["version"] == 3
    assert state["model"].keys() == model.state_dict().keys()  # rank 0 broadcasts its full weights from here
