"""The opponent pool: snapshots, sampling schemes (PFSP by hand), frozen players' own weights, exact resume."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

from reinforge.cli import main
from reinforge.config import ConfigError, load_config
from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.run.eval_command import run_eval
from reinforge.config.eval_config import eval_config
from reinforge.games.frozen_players import FrozenPlayers
from reinforge.games.pool import OpponentPool, OpponentPoolSpec
from reinforge.runtime import checkpoint as ckpt
from reinforge.run.preflight import preflight
from run_records import assert_same_run, copy_at_first_checkpoint

RECIPE = str(Path(__file__).parents[2] / "recipes" / "tictactoe-selfplay.yaml")
POOL_RUN = [
    "model.preset=nano", "task.train_size=16", "task.params.eval_games=1", "sft.steps=2", "sft.batch_size=4",
    "rollout.prompts_per_step=2", "rollout.group_size=4", "trainer.steps=3", "eval.every=3", "trainer.checkpoint_every=2",
    "telemetry.progress=false", "telemetry.tensorboard=false", "telemetry.wandb=off",
    "task.params.train_seats=[[policy, pool], [pool, policy]]",
    "task.params.opponent_pool={every: 1, size: 2, sample: pfsp, pfsp_power: 2.0}",
]


class Linear(torch.nn.Module):
    def __init__(self, value: float):
        super().__init__()
        self.w = torch.nn.Parameter(torch.full((2,), value))


def test_snapshots_are_copies_and_the_pool_keeps_its_newest() -> None:
    pool = OpponentPool(OpponentPoolSpec(every=5, size=2), seed=0)
    model = Linear(1.0)
    for step in (0, 5, 10):
        pool.snapshot(step, model)
        with torch.no_grad():
            model.w += 1.0  # training goes on; the snapshot must not follow
    assert [m.step for m in pool.members] == [5, 10]
    assert [m.weights["w"][0].item() for m in pool.members] == [2.0, 3.0]
    assert [pool.due(s) for s in (4, 5, 6, 10)] == [False, True, False, True]


def test_sampling_schemes_and_pfsp_by_hand() -> None:
    def pool_of(sample: str) -> OpponentPool:
        pool = OpponentPool(OpponentPoolSpec(size=3, sample=sample, pfsp_power=2.0), seed=0)
        for step in (0, 10, 20):
            pool.snapshot(step, Linear(0.0))
        return pool

    assert pool_of("latest").probabilities() == [0.0, 0.0, 1.0]
    assert pool_of("uniform").probabilities() == pytest.approx([1 / 3] * 3)
    pool = pool_of("pfsp")
    # step 0: the policy won 3 of 3 -> score (3 + 1) / 5 = 0.8, weight 0.2^2 = 0.04
    # step 10: 1 win, 2 draws, 1 loss -> (1 + 1 + 1) / 6 = 0.5, weight 0.25
    # step 20: unplayed -> 1/2, weight 0.25;   total 0.54
    for outcome in ("win", "win", "win"):
        pool.record("pool@0", outcome)
    for outcome in ("win", "draw", "draw", "loss", "unfinished"):  # a cut game is not counted
        pool.record("pool@10", outcome)
    assert pool.member("pool@10").games == 4
    assert pool.probabilities() == pytest.approx([0.04 / 0.54, 0.25 / 0.54, 0.25 / 0.54])
    draws = [pool.choose() for _ in range(2000)]
    assert 0.03 < draws.count("pool@0") / 2000 < 0.12  # 0.074 expected: beaten opponents fade out
    # the whole pool (weights, counts, RNG) comes back from its state
    clone = OpponentPool(pool.spec, seed=123)
    clone.load_state_dict(pool.state_dict())
    assert [clone.choose() for _ in range(50)] == [pool.choose() for _ in range(50)]
    assert clone.member("pool@10").draws == 2


def test_a_frozen_member_samples_with_its_own_weights(sharp_nano_model, tokenizer) -> None:
    model = copy.deepcopy(sharp_nano_model)
    policy_engine = TorchEngine(model, tokenizer.pad_token_id)
    pool = OpponentPool(OpponentPoolSpec(), seed=0)
    pool.snapshot(0, model)
    snapshot_engine = TorchEngine(type(model)(model.config).eval(), tokenizer.pad_token_id)
    snapshot_engine.model.load_state_dict(pool.member("pool@0").weights)
    with torch.no_grad():  # the policy trains on; the member stays as it was
        for p in model.parameters():
            p.add_(0.5 * torch.randn_like(p))
    policy_engine.sync_weights(1)
    prompts, params = [[1, 5, 9, 2], [1, 7, 3]], SamplingParams(6, 1.0)
    member = FrozenPlayers(pool, policy_engine).engines()["pool@0"]
    frozen = [g.token_ids for g in member.generate(prompts, params, seed=3)]
    assert frozen == [g.token_ids for g in snapshot_engine.generate(prompts, params, seed=3)]
    assert frozen != [g.token_ids for g in policy_engine.generate(prompts, params, seed=3)]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["task.params.train_seats=[[policy, pool]]"], "a `pool` seat needs task.params.opponent_pool"),
        (["task.params.opponent_pool={every: 2}"], "no game of task.params.train_seats has a `pool` seat"),
        (["task.params.train_seats=[[policy, pool]]", "task.params.opponent_pool={sample: best}"], "opponent_pool.sample"),
        (POOL_RUN[-2:] + ["trainer.schedule=async"], "trainer.schedule=async"),
        (["task.params.eval_opponents=[pool]"], "plays in training games only"),
    ],
)
def test_bad_pool_configs_are_refused_before_compute(overrides, message) -> None:
    with pytest.raises(ConfigError, match=message):
        preflight(load_config(RECIPE, overrides))


def test_pool_run_trains_against_frozen_members_resumes_exactly_and_evaluates(tmp_path: Path) -> None:
    reference = tmp_path / "reference"
    assert main(["train", "--recipe", "tictactoe-selfplay", "--output", str(reference), *POOL_RUN]) == 0
    rows = [json.loads(line) for line in (reference / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if r["stage"] == "rl"]
    assert [r["pool/size"] for r in rl] == [2.0, 2.0, 2.0]  # the warm start and step 1, then the newest two
    assert [r["pool/newest_step"] for r in rl] == [1.0, 2.0, 3.0]
    assert sum(r["pool/weight_loads"] for r in rl) >= 1  # members played through the frozen model
    evals = [r for r in rows if r["stage"] == "eval"]
    assert all(r["rating/anchor/minimax/mu"] > r["rating/anchor/random/mu"] and "rating/mu" in r for r in evals)
    samples = [json.loads(line) for line in (reference / "samples.jsonl").read_text().splitlines()]
    assert all(len(s["turns"]) >= 1 for s in samples)  # policy seats only: frozen seats never train
    state = ckpt.load_state(ckpt.list_checkpoints(reference)[-1])
    assert [m["step"] for m in state["env"]["opponent_pool"]["members"]] == [2, 3]  # the newest checkpoint (step 3, the end)

    copy = tmp_path / "copy"
    copy_at_first_checkpoint(reference, copy)  # the run at step 2, pool and its counts included
    assert main(["train", "--resume", str(copy)]) == 0
    assert_same_run(copy, reference)

    # `reinforge eval` on the run's final model: win / draw / loss per fixed opponent, and the rating
    chosen = eval_config(str(reference / "final"), None, [])  # the run's own config, as the CLI finds it
    report = run_eval(chosen.config, tmp_path / "eval", config_source=chosen.source)
    for opponent in ("random", "minimax"):
        rates = [report["metrics"][f"game/vs-{opponent}/{o}"] for o in ("win", "draw", "loss", "unfinished")]
        assert sum(rates) == pytest.approx(1.0)
    markdown = (tmp_path / "eval" / "eval.md").read_text()
    assert "| opponent | win | draw | loss | unfinished | not lost |" in markdown and "| minimax |" in markdown
    assert "rating (OpenSkill)" in markdown
