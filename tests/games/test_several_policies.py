"""Several distinct trainable policies in one run: refused configs, one engine per policy, each
policy trained on its own seats only, per-policy metrics and report, and exact resume."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from reinforge.config import ConfigError, load_config
from reinforge.engines.base import Generation, SamplingParams
from reinforge.games.describer_guesser import DescriberGuesser
from reinforge.games.env import GameEnv
from reinforge.games.match import Match, MatchRules
from reinforge.games.play import GameRun
from reinforge.games.spec import parse_spec
from reinforge.games.tasks import eval_seatings
from reinforge.run.pipeline import run_sft_stage, run_training
from reinforge.run.preflight import preflight
from reinforge.tasks.task import Task
from reinforge.telemetry.report import write_report
from reinforge.trainer.policy import owner
from run_records import copy_at_first_checkpoint, run_metrics

RECIPE = str(Path(__file__).parents[2] / "recipes" / "describer-guesser.yaml")
MICRO = [
    "model.preset=nano", "task.train_size=24", "task.params.eval_games=1", "sft.steps=2", "sft.batch_size=4",
    "rollout.prompts_per_step=3", "rollout.group_size=4", "trainer.steps=3", "eval.every=2", "trainer.checkpoint_every=2",
    "algo.epochs=1", "algo.mini_batches=1",
    "telemetry.progress=false", "telemetry.tensorboard=false", "telemetry.wandb=off",
    "algo.entropy_coef=0.01",  # a 2-step warm-up plays no legal move (every reward -1): the entropy term still moves the weights
]


def config(*overrides: str):
    return load_config(RECIPE, list(overrides))


def test_the_recipe_passes_and_is_a_run_of_two_policies() -> None:
    cfg = config()
    preflight(cfg)
    assert len(cfg.policies) > 1 and not len(config("policies=[policy]", "task.params.train_seats=[[policy, policy]]").policies) > 1


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["task.params.train_seats=[[describer, judge]]"], "task.params.train_seats[0]: unknown player 'judge'"),
        (["policies=[describer, guesser, judge]"], "policies: 3 trainable policies but describer_guesser has 2 players"),
        (["task.params.train_seats=[[describer, literal]]"], "policies.guesser: this policy plays no seat"),
        (["policies=[literal, guesser]"], "policies: 'literal' is the name of a fixed player"),
        (["policies=[describer, describer]"], "is named twice"),
        (["policies={describer: {lr: 1}, guesser: {}}"], "policies.describer.lr"),
        (["task.params.game=tictactoe", "env.max_turns=12", "policies=[a, b, c]"], "3 trainable policies but tictactoe has 2 players"),
        (["task.params.policies=[describer, guesser]"], "task.params.policies moved to the top-level `policies:` section"),
        (["policies=[describer, guesser]", "task.source=arithmetic", "env.type=single_turn"], "several trainable policies play the seats of a game"),
    ],
)
def test_bad_multi_policy_configs_are_refused_before_compute(overrides, message) -> None:
    with pytest.raises(ConfigError) as err:
        preflight(config(*overrides))
    assert message in str(err.value)


def test_the_sft_command_refuses_several_policies(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="reinforge sft` warms up one model"):
        run_sft_stage(config(f"trainer.output_dir={tmp_path / 'run'}"))
    assert not (tmp_path / "run").exists()  # refused before anything


def test_each_policy_is_evaluated_alone_with_the_fixed_partner_and_the_pair_together() -> None:
    cfg = config()
    spec, game = parse_spec(cfg.task.params, list(cfg.policies))
    assert spec.seats(game)[0] == ["describer", "guesser"]
    seatings = [(seats, family) for seats, family, _ in eval_seatings(spec, game)]
    assert seatings == [
        (["describer", "literal"], "vs-literal"), (["literal", "guesser"], "vs-literal"), (["describer", "guesser"], "joint"),
    ]
    spec, game = parse_spec({"game": "describer_guesser"}, ["describer", "guesser"])
    assert spec.seats(game) == [["describer", "guesser"]]  # default: the policies in seat order


class VersionEngine:
    """Answers a fixed move per role, tagged with its own policy version; records its prompts."""

    def __init__(self, tokenizer, stop_id, version):
        self.tokenizer, self.stop_id, self.policy_version, self.prompts = tokenizer, stop_id, version, []

    def generate(self, prompts, params, seed=None):
        out = []
        for prompt in prompts:
            text = self.tokenizer.decode(prompt)
            self.prompts.append(text)
            move = "2" if "You are the describer" in text else "1"
            ids = self.tokenizer(move, add_special_tokens=False).input_ids + [self.stop_id]
            out.append(Generation(ids, [-0.1] * len(ids), "stop", self.policy_version))
        return out


def test_each_policys_seats_are_sampled_by_its_own_engine(tokenizer) -> None:
    env = GameEnv(tokenizer, max_turns=4)
    meta = {"game": "describer_guesser", "seats": ["describer", "guesser"], "policies": ["describer", "guesser"],
            "game_seed": 3, "draw_reward": 0.0, "max_illegal_moves": 2, "family": "joint", "demo_seat": 0}
    task = Task(id="dg", prompt=[{"role": "user", "content": "?"}], answer="", metadata=meta)
    engines = {"describer": VersionEngine(tokenizer, env.chat.end_of_turn_id, 3), "guesser": VersionEngine(tokenizer, env.chat.end_of_turn_id, 5)}
    trajectories = env.run_groups(engines, [task], 6, SamplingParams(4, stop_token_ids=env.stop_token_ids), seed=0)
    assert len(trajectories) == 6  # 3 games, one trajectory per seat
    assert len(engines["describer"].prompts) == len(engines["guesser"].prompts) == 3
    assert all("You are the describer" in p for p in engines["describer"].prompts)
    assert all("You are the guesser" in p and "clue for" not in p for p in engines["guesser"].prompts)
    for t in trajectories:
        assert (owner(t, task, env), t.policy_version) == {"describer": ("describer", 3), "guesser": ("guesser", 5)}[t.agent]
    fixed = GameRun(task, 0, ["literal", "guesser"], Match(DescriberGuesser(), MatchRules(max_turns=4), ("lime", "", "")),
                    random.Random(0), policies=("describer", "guesser"))
    assert list(fixed.streams) == [1]  # a fixed player's seat has no trajectory


def weights(run_dir: Path, name: str) -> dict[str, torch.Tensor]:
    return load_file(run_dir / "final" / name / "model.safetensors")


def test_a_two_policy_run_trains_each_policy_reports_both_and_resumes_exactly(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_training(config(*MICRO, f"trainer.output_dir={run_dir}"))
    for name in ("describer", "guesser"):  # each policy: its own warm start, checkpoints and final model
        warm, final = load_file(run_dir / "warm_start" / name / "model.safetensors"), weights(run_dir, name)
        assert any(not torch.equal(warm[k], final[k]) for k in warm), f"{name} was not trained"
        assert (run_dir / "checkpoints" / "step_000003" / "model" / name / "config.json").is_file()
    d, g = weights(run_dir, "describer"), weights(run_dir, "guesser")
    assert any(not torch.equal(d[k], g[k]) for k in d)  # two distinct models

    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rl, evals = [r for r in rows if r["stage"] == "rl"], [r for r in rows if r["stage"] == "eval"]
    for name in ("describer", "guesser"):
        assert all(f"policy/{name}/reward" in r and f"policy/{name}/loss" in r for r in rl)
        assert all(f"policy/{name}/accuracy" in r and f"policy/{name}/vs-literal/win" in r for r in evals)
    assert all("game/joint/win" in r for r in evals)
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert {s["policy"] for s in samples} == {"describer", "guesser"}
    assert all(s["prompt"] == [{"role": "user", "content": s["turns"][0]["text"]}] for s in samples)  # what the seat saw
    titles = " ".join(re.findall(r"<!-- (.*?) -->", write_report(run_dir).read_text()))  # matplotlib's names of its texts
    for label in ("Reward per policy", "Held-out not-lost rate per policy", "describer", "guesser"):
        assert label in titles

    copy = tmp_path / "copy"
    copy_at_first_checkpoint(run_dir, copy)
    run_training(load_config(str(copy / "config.yaml")), resume=True)
    for name in ("describer", "guesser"):
        a, b = weights(run_dir, name), weights(copy, name)
        assert all(torch.equal(a[k], b[k]) for k in a), f"{name}: resumed weights differ"
    assert run_metrics(run_dir) == run_metrics(copy)
