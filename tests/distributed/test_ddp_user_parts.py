"""A user's policy loss and advantage estimator with `workers.learners=2`: the follower learner (a
spawned process) imports the loss from a module found only beside the user's recipe,
and the run makes the same update as with one learner; a follower that cannot import the loss
stops the run at its start with the import error."""

from __future__ import annotations

import os
import sys
import types

import pytest
import torch
from safetensors.torch import load_file

from reinforge.config import AlgoConfig, ConfigError, load_config
from reinforge.distributed.learner_group import FollowerSpec, LearnerGroup
from reinforge.models.tiny_llama import build_tiny_llama
from reinforge.models.tokenizer import train_tokenizer
from reinforge.run.pipeline import run_training
from user_code import user_project  # noqa: F401 - fixture
from deadlines import PROCESS_START_S

ALGOS = """
    import os
    from pathlib import Path

    import torch

    from reinforge.algos.losses.ppo_clip import ppo_clip
    from reinforge.algos.types import AdvantageOutput


    def centered(inputs):
        # A_i = r_i - mean of its group (a plain function: no registration needed)
        advantages = torch.zeros_like(inputs.rewards, dtype=torch.float32)
        for group in inputs.group_ids.unique():
            members = inputs.group_ids == group
            advantages[members] = (inputs.rewards[members] - inputs.rewards[members].mean()).float()
        return AdvantageOutput(advantages, metrics={"centered_calls": 1.0})


    def doubled_ppo(logprobs, old_logprobs, advantages, mask, params):
        # Which process computed a loss, for the test (a loss would not do this).
        with open(Path(__file__).with_name("loss_calls.log"), "a") as log:
            log.write(f"{os.getpid()}\\n")
        loss, metrics = ppo_clip(logprobs, old_logprobs, advantages, mask, params)
        return 2.0 * loss, metrics


    def letter_share(task, trajectory):
        text = trajectory.response_text
        return sum(c in "abcdefghijklm" for c in text) / max(1, len(text))
"""

RUN = [
    "model.preset=nano", "task.train_size=40", "task.eval_size=4", "sft.steps=0", "trainer.steps=2",
    "rollout.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=8", "eval.every=100",
    "eval.samples=1", "trainer.checkpoint_every=0", "telemetry.progress=false", "telemetry.tensorboard=false",
    "telemetry.wandb='off'", "workers.timeout_s=120", f"workers.startup_timeout_s={PROCESS_START_S:g}", "algo.micro_batch_size=2",
]

RECIPE = """
algo:
  advantage: ddp_user_algos:centered
  policy_loss: ddp_user_algos:doubled_ppo
reward:
  components:
    - {name: letters, fn: "ddp_user_algos:letter_share"}
"""


@pytest.mark.slow  # a whole run (~20-100 s); .ci/run runs the slow group of this file
def test_a_user_loss_and_estimator_with_two_learners_match_one_learner(user_project, tmp_path) -> None:
    # The module lives beside the recipe, not in the current directory: only the recipe's
    # directory (an import root) leads the follower process to it.
    user_project.write("recipes/ddp_user_algos.py", ALGOS)
    recipe = user_project.write("recipes/exp.yaml", RECIPE)
    log = user_project.dir / "recipes" / "loss_calls.log"
    runs, pids = {}, {}
    for learners in (1, 2):
        log.write_text("")
        cfg = load_config(str(recipe), [*RUN, f"workers.learners={learners}", f"trainer.output_dir={tmp_path / str(learners)}"])
        runs[learners] = run_training(cfg)
        pids[learners] = {int(line) for line in log.read_text().split()}
    one, two = runs[1], runs[2]
    assert pids[1] == {os.getpid()}
    assert len(pids[2]) == 2 and os.getpid() in pids[2]  # rank 0 and the follower both used the user's loss
    assert all(s["centered_calls"] == 1.0 for s in two.rl.steps)  # the estimator, on rank 0
    assert any(s["loss"] != 0.0 for s in one.rl.steps)  # the rewards vary within groups: real updates
    assert two.rl.rewards == pytest.approx(one.rl.rewards, abs=1e-6)
    assert [s["loss"] for s in two.rl.steps] == pytest.approx([s["loss"] for s in one.rl.steps], rel=1e-4, abs=1e-6)
    w1, w2 = (load_file(r.run_dir / "final" / "model.safetensors") for r in (one, two))
    assert max((w1[k] - w2[k]).abs().max().item() for k in w1) < 1e-5


def test_a_follower_that_cannot_import_the_loss_stops_the_group_at_start(user_project, monkeypatch) -> None:
    # The trainer has a module the spawned follower does not (set up in a notebook, say).
    monkeypatch.setitem(sys.modules, "trainer_only_dependency", types.ModuleType("trainer_only_dependency"))
    path = user_project.write("needs_trainer_loss.py", "import trainer_only_dependency\n\ndef loss(lp, old, adv, mask, params):\n    return lp, {}\n")
    algo = AlgoConfig(policy_loss=f"{path}:loss")
    torch.set_num_threads(1)
    model = build_tiny_llama(train_tokenizer(["1+2=3", "4+5=9"]), "nano", seed=0)
    spec = FollowerSpec(model.config, dict(lr=1e-3, micro_batch_size=2, max_response_tokens=8), algo, threads=1, timeout_s=120, startup_timeout_s=PROCESS_START_S)
    assert str(user_project.dir.resolve()) in spec.roots  # the trainer's import roots travel with the spec
    started: list = []
    original = LearnerGroup._wait_started

    def recording(self, rank, reader):
        started.extend(self.followers)
        return original(self, rank, reader)

    monkeypatch.setattr(LearnerGroup, "_wait_started", recording)
    with pytest.raises(ConfigError) as err:
        LearnerGroup(2, spec, model)
    message = str(err.value)
    assert message.startswith("algo.policy_loss: data-parallel learner rank 1")
    assert "No module named 'trainer_only_dependency'" in message and f"{path.resolve()}:1" in message
    assert started and all(not p.is_alive() for p in started)  # no follower left behind
