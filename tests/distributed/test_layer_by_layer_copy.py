"""Rank 0's sharded copy is made one decoder layer at a time (reinforge.distributed.fsdp.copied_layer_by_layer):
beside the loop's full model, at most the root's tensors and one layer exist twice at start-up (issue 30, item 3).
Single process: `shard_layer` stands in for FSDP2's `fully_shard`, which frees the layer's full weights."""

from __future__ import annotations

import copy
import gc

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from reinforge.distributed.fsdp import copied_layer_by_layer, decoder_layers
from reinforge.models.value_model import ValueModel

from packed_batches import small


def live_copies_of(weight: torch.nn.Parameter) -> int:
    """Parameters alive in this process, other than `weight`, of its shape and not emptied: copies of it
    and of its kind in the other layers."""
    return sum(
        1 for obj in gc.get_objects()
        if type(obj) is torch.nn.Parameter and obj is not weight and obj.numel() and obj.shape == weight.shape
    )


def test_each_layer_is_copied_after_the_previous_one_was_sharded():
    model = small(LlamaForCausalLM, LlamaConfig, num_hidden_layers=4, intermediate_size=56)
    down = [layer.mlp.down_proj.weight for layer in model.model.layers]  # [32, 56]: no other parameter has the shape
    before = {name: p.detach().clone() for name, p in model.state_dict().items()}
    copies_seen = []

    def shard_layer(layer: torch.nn.Module) -> None:
        copies_seen.append(live_copies_of(down[0]) - (len(down) - 1))  # less the model's own other layers
        for p in layer.parameters():
            p.data = torch.empty(0)  # what fully_shard does to the full weights: gone

    copied_layer_by_layer(model, shard_layer)
    # at each call one copy exists, the layer's being sharded: the earlier ones are sharded, the later not yet copied
    # (a whole copy.deepcopy first would show 4 at the first call)
    assert copies_seen == [1, 1, 1, 1]
    for name, tensor in model.state_dict().items():  # the original is untouched
        assert torch.equal(tensor, before[name]), name


def test_the_copy_is_the_model_bit_for_bit_with_its_ties_and_frozen_weights():
    model = small(LlamaForCausalLM, LlamaConfig, num_hidden_layers=3, tie_word_embeddings=True)
    model.model.layers[1].mlp.down_proj.weight.requires_grad_(False)
    shell = copied_layer_by_layer(model, lambda layer: None)
    reference = copy.deepcopy(model)
    assert shell.state_dict().keys() == reference.state_dict().keys()
    for (name, ours), (_, theirs) in zip(shell.named_parameters(), reference.named_parameters(), strict=True):
        assert torch.equal(ours, theirs) and ours.requires_grad == theirs.requires_grad, name
        assert ours.data_ptr() != dict(model.named_parameters())[name].data_ptr(), f"{name} is not a copy"
    assert shell.lm_head.weight is shell.model.embed_tokens.weight  # tied, as in the model
    assert all(layer.self_attn.config is shell.config for layer in shell.model.layers)  # one config, as deepcopy keeps it
    ids = torch.tensor([[1, 5, 7, 9]])
    assert torch.equal(shell(ids).logits, model(ids).logits)


def test_a_critic_is_copied_layer_by_layer_too():
    critic = ValueModel.from_policy(small(LlamaForCausalLM, LlamaConfig, num_hidden_layers=2))
    calls = []
    shell = copied_layer_by_layer(critic, calls.append)
    assert calls == list(decoder_layers(shell))
    for (name, ours), (_, theirs) in zip(shell.state_dict().items(), critic.state_dict().items(), strict=True):
        assert torch.equal(ours, theirs), name
