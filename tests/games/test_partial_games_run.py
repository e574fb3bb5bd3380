"""Partial rollouts of games end to end on tiny runs: self-play, an opponent pool, two policies.

Each run over-provisions the games (trainer.overprovision=2): a step stops sampling once half of
its groups have every game over, so the other games pause between moves (or mid-turn) and resume
next step with the newer weights. What is checked on every trained trajectory: each sampled token
is tagged with the version that sampled it, in order, the trajectory's version is its oldest
token's and within trainer.max_staleness of the learner's; and some games did span two steps
(tokens of two versions in one trajectory). A run resumed from a checkpoint taken with games
paused is the uninterrupted run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reinforge.config import load_config
from reinforge.run.pipeline import run_sft_stage, run_training
from reinforge.runtime import checkpoint as ckpt
from run_records import assert_same_run, copy_at_first_checkpoint

ROOT = Path(__file__).parents[2] / "recipes"
QUIET = ["telemetry.progress=false", "telemetry.tensorboard=false", "telemetry.wandb=off"]
TINY = [
    "model.preset=nano", "task.train_size=64", "task.params.eval_games=1", "rollout.prompts_per_step=2", "rollout.group_size=4",
    "trainer.steps=4", "eval.every=100", "trainer.checkpoint_every=0", *QUIET,
]
# A short warm-up: its policy ends some turns early and plays some legal moves, so games differ in
# length and a step's quota leaves some of them going (an untrained model's games all end alike).
WARM_UP = ["sft.steps=40", "sft.lr=0.003", "sft.batch_size=16"]
PARTIAL = ["trainer.partial_rollouts=true", "trainer.overprovision=2.0", "trainer.max_staleness=1", "algo.tis_cap=2.0"]
POOL = ["task.params.opponent_pool={every: 1, size: 1}", "task.params.train_seats=[[policy, pool], [pool, policy]]"]
COMBINATIONS = {"self-play": [], "opponent pool": POOL, "two policies": None}
UPDATES_PER_STEP = {"self-play": 1, "opponent pool": 1, "two policies": 4}  # the recipes' algo.epochs x algo.mini_batches


@pytest.fixture(scope="module")
def tictactoe_warm_start(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("sft") / "run"
    return run_sft_stage(load_config(str(ROOT / "tictactoe-selfplay.yaml"), [*TINY, *WARM_UP, f"trainer.output_dir={run}"]))


def train(run_dir: Path, recipe: str, *overrides: str):
    return run_training(load_config(str(ROOT / f"{recipe}.yaml"), [*TINY, *PARTIAL, *overrides, f"trainer.output_dir={run_dir}"]))


def train_tictactoe(warm_start: Path, run_dir: Path, *overrides: str):
    return train(run_dir, "tictactoe-selfplay", f"model.path={warm_start}", "sft.steps=0", *overrides)


def sampled_versions(t) -> list[int]:
    return [v for v, sampled in zip(t.token_versions, t.loss_mask) if sampled]


@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_games_pause_and_resume_with_newer_weights(tmp_path: Path, request, recorded, name: str) -> None:
    if COMBINATIONS[name] is None:  # two policies: each warms up in the run (`reinforge sft` warms up one model)
        outcome = train(tmp_path / "run", "describer-guesser", *WARM_UP)
    else:
        outcome = train_tictactoe(request.getfixturevalue("tictactoe_warm_start"), tmp_path / "run", *COMBINATIONS[name])
    spanning = 0
    agents = set()
    for learner_version, trajectories in recorded:
        for t in trajectories:
            versions = sampled_versions(t)
            assert len(t.token_versions) == len(t.token_ids) and versions == sorted(versions)
            if versions:
                assert t.policy_version == versions[0]
            assert (learner_version - t.policy_version) // UPDATES_PER_STEP[name] <= 1  # trainer.max_staleness, in RL steps
            spanning += len(set(versions)) > 1
            agents.add(t.agent)
    steps = outcome.rl.steps
    assert sum(s.get("partial_resumed", 0) for s in steps) > 0, steps
    assert spanning > 0, "no game's trajectory holds tokens of two weight versions"
    assert max(s["partial_carried_groups"] for s in steps) > 0
    if name == "two policies":  # each policy trained on its own seats, both carried over
        assert any("policy/describer/staleness_max" in s for s in steps) and any("policy/guesser/staleness_max" in s for s in steps)
    if name == "opponent pool":
        assert all(s["pool/size"] == 1 for s in steps)


def test_a_run_resumed_with_games_paused_is_the_uninterrupted_run(tictactoe_warm_start: Path, tmp_path: Path) -> None:
    full = tmp_path / "full"
    train_tictactoe(tictactoe_warm_start, full, *POOL, "trainer.checkpoint_every=2", "trainer.keep_checkpoints=10")
    state = ckpt.load_state(ckpt.list_checkpoints(full)[0])
    paused = [game for group in state["schedule"]["collector"]["pool"] for game in group.episodes if not game.done]
    assert paused, "the first checkpoint holds no game in progress"
    # pool {every: 1, size: 1}: the member a paused game seats left the pool at the snapshot, and stays retired
    seated = {who for game in paused for who in game.run.players if who.startswith("pool@")}
    retired = {f"pool@{m['step']}" for m in state["env"]["opponent_pool"].get("retired", [])}
    assert seated & retired, (seated, retired)
    copy = tmp_path / "copy"
    run_training(load_config(str(copy_at_first_checkpoint(full, copy))), resume=True)
    assert_same_run(full, copy)
