"""A sharded learner asked for what this machine or this batch cannot give: one clear line each,
before any compute (issue 30's bad input: NCCL without GPUs, more learners than sequences)."""

from __future__ import annotations

import pytest
import torch

from reinforge.cli import main
from reinforge.config import ConfigError, load_config
from reinforge.distributed.ddp import free_port, init_distributed
from reinforge.distributed.learner_group import ShardedDriverLearner
from reinforge.run import preflight

SHARDED = ["workers.learners=2", "workers.sharding=fsdp"]
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine where torch sees no GPU")


@no_gpu
def test_config_validate_refuses_nccl_without_a_gpu_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "validate", "model.device=cuda", *SHARDED]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert "model.device=cuda but torch sees no CUDA GPU" in err and "use model.device=cpu" in err


@no_gpu
def test_a_resume_asking_for_cuda_is_refused_by_the_same_check() -> None:
    """`train --resume RUN --force model.device=cuda` runs preflight with resuming=True (pipeline.start_run)."""
    cfg = load_config("default", ["model.device=cuda", *SHARDED])
    with pytest.raises(ConfigError, match=r"model.device=cuda but torch sees no CUDA GPU .* use model.device=cpu"):
        preflight.preflight(cfg, resuming=True)


@no_gpu
@pytest.mark.parametrize(("device", "backend"), [("cuda:0", None), ("cpu", "nccl")])
def test_a_rank_asked_for_nccl_without_a_gpu_says_so_before_the_rendezvous(device: str, backend: str | None) -> None:
    """A rank started past preflight (a library caller, a host whose GPUs are hidden) fails in one
    line naming the setting, instead of torch's "not compiled with CUDA" assertion."""
    with pytest.raises(RuntimeError, match=r"^learner rank 1 needs NCCL on .* torch sees no CUDA GPU .* set model.device=cpu"):
        init_distributed(1, 2, free_port(), backend=backend, timeout_s=1, device=device)
    assert not torch.distributed.is_initialized()


def test_more_sharded_learners_than_a_mini_batch_holds_is_refused_with_both_numbers() -> None:
    sizes = ["rollout.prompts_per_step=2", "rollout.group_size=2", "algo.mini_batches=2"]
    with pytest.raises(ConfigError, match=r"workers.learners=3 .* a mini-batch holds 2; lower workers.learners or algo.mini_batches"):
        preflight.preflight(load_config("default", [*sizes, "workers.learners=3", "workers.sharding=fsdp"]))
    preflight.preflight(load_config("default", [*sizes, *SHARDED]))


def test_a_mini_batch_that_lost_rows_below_the_learner_count_stops_in_one_line_before_any_collective() -> None:
    """What preflight cannot know (samples dropped, a policy's share of a game's seats) is refused
    by rank 0 before it sends the batch: a config error naming the keys, not a rank with no rows."""
    from test_ddp import make_batch, make_tokenizer

    tokenizer = make_tokenizer()
    batch = make_batch(len(tokenizer), tokenizer.pad_token_id).select(slice(0, 2))
    driver = ShardedDriverLearner.__new__(ShardedDriverLearner)  # no process group: nothing may reach one
    driver.world_size = 3
    with pytest.raises(ConfigError, match=r"^a mini-batch of 2 sequences cannot be split over workers.learners=3 .*: lower workers.learners"):
        driver.train_step(batch, loss_fn=None)
