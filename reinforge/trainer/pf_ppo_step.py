"""PF-PPO in the loop: the update trains on a batch re-sampled by reward (reinforge.algos.losses.pf_ppo).

Applied after the advantages (as verl does), so every sample's advantage and its group's baseline
are those of the batch as sampled; only which rows the optimizer sees changes. The draw uses the
loop's own generator (saved in checkpoints), so a resumed run draws the same rows.
"""

from __future__ import annotations

import torch

from reinforge.algos.losses.pf_ppo import pf_ppo_rows
from reinforge.config import AlgoConfig
from reinforge.learner.batch import TrainingBatch
from reinforge.rollout.trajectory import Trajectory


def pf_ppo_batch(
    batch: TrainingBatch, trajectories: list[Trajectory], algo: AlgoConfig, generator: torch.Generator
) -> tuple[TrainingBatch, dict[str, float]]:
    """The batch's rows re-drawn by PF-PPO (algo.pf_ppo), and mask/pf_ppo_dropped_frac, the share
    of samples not drawn at all; the batch itself when algo.pf_ppo is unset."""
    if algo.pf_ppo is None:
        return batch, {}
    scores = torch.tensor([t.reward for t in trajectories], dtype=torch.float64)
    rows = pf_ppo_rows(scores, algo.pf_ppo, algo.pf_ppo_pow, generator)
    dropped = 1.0 - len(set(rows.tolist())) / len(trajectories)
    return batch.select(rows), {"mask/pf_ppo_dropped_frac": dropped}
