"""`reinforge train` with workers.learners=2 workers.sharding=fsdp and LoRA, or a critic (sharded
too): the run trains, its checkpoint holds what the part needs, and a run resumed from it is the same run."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from reinforge.distributed.sharded_checkpoint import SHARDED_DIR
from reinforge.runtime import checkpoint as ckpt
from run_records import assert_same_run, copy_at_first_checkpoint, run_metrics
from test_sharded_checkpoint import BASE, train


def resumes_exactly(full: Path, copy: Path) -> None:
    copy_at_first_checkpoint(full, copy)
    train("--resume", str(copy))
    assert_same_run(full, copy)


@pytest.mark.slow  # whole sharded runs (~50 s each); .ci/run runs tests/distributed -m slow
def test_a_sharded_lora_run_trains_the_adapters_and_resumes_exactly(tmp_path: Path) -> None:
    pytest.importorskip("peft")
    full = tmp_path / "full"
    train("--output", str(full), *BASE, "model.lora={r: 4}", "algo.lr=0.01")
    rl = [r for r in run_metrics(full) if r.get("stage") == "rl"]
    assert len(rl) == 3 and any(r["grad_norm"] > 0 for r in rl)
    setup = next(r for r in run_metrics(full) if "trainable_params" in r)
    assert 0 < setup["trainable_params"] < setup["total_params"] / 10, "the adapters train, not the base"
    # The step-2 checkpoint's shards: AdamW moments of the adapters only (each rank wrote its
    # shards), one full-size moment per adapter tensor, all of them moved by the two steps.
    first = ckpt.list_checkpoints(full)[0]
    state = ckpt.load_state(first)
    assert state["learner_version"] == 2
    dcp_to_torch_save(first / SHARDED_DIR, tmp_path / "whole.pt")  # the ranks' shards as one plain file
    moments = torch.load(tmp_path / "whole.pt", weights_only=False)["policy"]["optimizer"]["state"]
    adapter = load_file(full / "final" / "adapter" / "adapter_model.safetensors")
    assert sorted(tuple(m["exp_avg"].shape) for m in moments.values()) == sorted(tuple(t.shape) for t in adapter.values())
    assert all(torch.count_nonzero(m["exp_avg_sq"]) > 0 for m in moments.values())
    assert any(torch.count_nonzero(t) > 0 for name, t in adapter.items() if "lora_B" in name), "B starts at zero: it trained"
    resumes_exactly(full, tmp_path / "copy")


def elements_by_rank(directory: Path, prefix: str) -> dict[str, int]:
    """How many elements of the saved tensors whose names start with `prefix` each rank's file of a
    DCP checkpoint holds (its `__<rank>_0.distcp`): what each rank had of them."""
    metadata = FileSystemReader(str(directory)).read_metadata()
    held: dict[str, int] = {}
    for index, info in metadata.storage_data.items():
        if index.fqn.startswith(prefix):
            chunk = metadata.state_dict_metadata[index.fqn].chunks[index.index or 0]
            held[info.relative_path] = held.get(info.relative_path, 0) + math.prod(chunk.sizes)
    return held


@pytest.mark.slow  # whole sharded runs (~50 s each); .ci/run runs tests/distributed -m slow
def test_a_sharded_run_with_a_critic_trains_it_and_resumes_exactly(tmp_path: Path) -> None:
    """The policy and the critic are sharded over the 2 ranks (reinforge.distributed.critic_group):
    the critic trains every step, each rank wrote half of its weights and AdamW moments into the
    checkpoint's shards (rank 1's moved: it stepped its half), and a resumed run is the same run."""
    full = tmp_path / "full"
    train("--output", str(full), *BASE, "critic.enabled=true", "algo.advantage=gae")
    rl = [r for r in run_metrics(full) if r.get("stage") == "rl"]
    assert len(rl) == 3 and any(r["grad_norm"] > 0 for r in rl)
    assert all(r["value_grad_norm"] > 0 for r in rl), "the critic trained every step"
    first = ckpt.list_checkpoints(full)[0]
    state = ckpt.load_state(first)
    assert state["critic"]["optimizer"]["key"] == "critic/policy", "the critic's AdamW state is in the shards"
    for part in ("critic/policy.model.", "critic/policy.optimizer.state."):
        held = elements_by_rank(first / SHARDED_DIR, part)
        assert sorted(held) == ["__0_0.distcp", "__1_0.distcp"], part
        assert 0.4 < held["__1_0.distcp"] / sum(held.values()) < 0.6, f"{part}: rank 1 holds half of them"
    dcp_to_torch_save(first / SHARDED_DIR, tmp_path / "whole.pt")  # the ranks' shards as one plain file
    critic = torch.load(tmp_path / "whole.pt", weights_only=False)["critic/policy"]
    assert critic["model"].keys() == state["critic"]["model"].keys()
    assert all(torch.equal(critic["model"][k], v) for k, v in state["critic"]["model"].items()), "rank 0's full copy is the shards"
    # Every decoder weight has a gradient everywhere (the embedding only on the tokens seen): both
    # halves of its moments (rank 0's and rank 1's shard, dim 0) moved.
    layers = {name: m["exp_avg_sq"] for name, m in critic["optimizer"]["state"].items() if ".layers." in name}
    assert layers and all(torch.count_nonzero(half) == half.numel() for moment in layers.values() for half in moment.chunk(2)), (
        "both ranks stepped their halves of the critic"
    )
    resumes_exactly(full, tmp_path / "copy")
