"""The w_reinforce preset, through prepare_batch, gives the authors' W-REINFORCE advantages.

Binary verifier scores on sampled nano trajectories (ragged lengths); the authors' function
(tests/algos/reference/rlvr_decomposed_psr_nsr.py) is applied to the batch's own loss mask with the
score on each row's last sampled token, lambda 0.1 (the preset's positive_weight).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from reinforge.algos.advantages import get_estimator
from reinforge.config import load_config
from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.envs.single_turn import SingleTurnEnv
from reinforge.rollout.episodes import rollout_groups
from reinforge.tasks.task import Task
from reinforge.trainer.advantage_step import prepare_batch

sys.path.insert(0, str(Path(__file__).parents[1] / "algos"))
from reference.rlvr_decomposed_psr_nsr import compute_psr_nsr_outcome_advantage  # noqa: E402

# group 0 mixed, group 1 all correct, group 2 all wrong (0 under GRPO, -1 each under W-REINFORCE)
SCORES = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]


def test_w_reinforce_preset_equals_the_authors_formula(tokenizer, nano_model) -> None:
    engine = TorchEngine(nano_model, tokenizer.pad_token_id)
    tasks = [Task(id=f"t{i}", prompt=text, answer="0") for i, text in enumerate(["1+2=", "35+7=", "9="])]
    params = SamplingParams(max_new_tokens=6, temperature=1.0, stop_token_ids=(tokenizer.eos_token_id,))
    trajectories = rollout_groups(engine, SingleTurnEnv(tokenizer, "raw"), tasks, 4, params, seed=3)
    for t, s in zip(trajectories, SCORES):
        t.rewards, t.reward = {"correct": s}, s
    algo = load_config("default", ["algo.method=w_reinforce"]).algo
    assert (algo.advantage, algo.reinforce_reward, algo.positive_weight) == ("reinforce", "signed", 0.1)
    batch, _ = prepare_batch(trajectories, algo, get_estimator(algo.advantage), {"correct": 1.0}, tokenizer.pad_token_id, None, None, None)

    mask = batch.loss_mask
    last = mask & (mask.long().cumsum(1) == mask.long().sum(1, keepdim=True))
    token_scores = last.double() * torch.tensor(SCORES, dtype=torch.float64)[:, None]
    expected, _ = compute_psr_nsr_outcome_advantage(token_scores, token_scores, mask.double(), 1.0, "weighted", 0.1)
    assert torch.allclose(batch.advantages.double()[:, None] * mask, expected, atol=1e-7)
    assert batch.advantages[8:].tolist() == [-1.0] * 4  # the all-wrong group pushes away from all it sampled
