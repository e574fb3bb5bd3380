"""A trainable policy: the unit the recipe builds and the RL loop trains, once per `policies:` entry.

A Policy bundles its model (the learner's), optimizer (learner), the data-parallel learner group
(workers.learners > 1: one for the run, serving every policy), rollout engine, reference, critic, LoRA base digest and mini-batch shuffle.
A run of one policy is the one-element case and keeps the layout of runs before several policies
existed: its checkpoint state at the top level of state.pt, metrics unprefixed, `final/`. Several
policies (a game's seats, `policies:`) nest their state under `policies/<name>`, log under
`policy/<name>/` and save to `<dir>/<name>/` (the rule lives here: `for_policies`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from reinforge.engines.base import Engine
from reinforge.learner.critic_learner import CriticLearner
from reinforge.learner.policy_learner import PolicyLearner
from reinforge.learner.reference import ReferenceModel
from reinforge.rollout.trajectory import Trajectory
from reinforge.runtime.checkpoint import PART
from reinforge.runtime.resume_changes import load_optimizer_state
from reinforge.tasks.task import Task


@dataclass
class Policy:
    learner: PolicyLearner  # its model (learner.model) and optimizer
    engine: Engine
    shuffle: torch.Generator  # its mini-batch order (and PF-PPO's draws)
    reference: ReferenceModel | None = None
    critic: CriticLearner | None = None
    learner_group: Any = None  # the data-parallel followers behind `learner` (workers.learners > 1; shared by the run's policies)
    lora_digest: str | None = None  # the digest of a LoRA policy's frozen base, checked when resuming

    @property
    def model(self):
        return self.learner.model

    def state_dict(self) -> dict:
        """Everything of this policy besides its weights that the next step depends on."""
        state = {
            "optimizer": self.learner.optimizer.state_dict(),
            "learner_version": self.learner.version,
            "reference": self.reference.state_dict() if self.reference is not None else None,
            "critic": (
                {"model": self.critic.model.state_dict(), "optimizer": self.critic.optimizer.state_dict()}
                if self.critic is not None else None
            ),
            "shuffle": self.shuffle.get_state(),
        }
        if self.lora_digest is not None:
            state["lora_base_sha256"] = self.lora_digest
        return state

    def load_state_dict(self, state: dict) -> None:
        load_learner_state(self.learner, state["optimizer"])
        self.learner.version = state["learner_version"]
        if self.reference is not None:
            self.reference.load_state_dict(state["reference"])
        if self.critic is not None:
            self.critic.model.load_state_dict(state["critic"]["model"])
            load_learner_state(self.critic, state["critic"]["optimizer"])
        self.shuffle.set_state(state["shuffle"])

    def close(self) -> None:
        getattr(self.engine, "close", lambda: None)()  # Ray workers, vLLM; the in-process engine has none
        if self.learner_group is not None:
            self.learner_group.close()


def load_learner_state(learner, optimizer_state: dict) -> None:
    """A learner's (policy's or critic's) optimizer state as state.pt keeps it: a plain state_dict,
    or the entry of a sharded learner's, whose weights and moments are in the checkpoint's sharded/."""
    if isinstance(optimizer_state, dict) and PART in optimizer_state:
        from reinforge.distributed.sharded_checkpoint import load_learner_shards  # DCP: only such a checkpoint imports it

        load_learner_shards(learner, optimizer_state)
    else:
        load_optimizer_state(learner.optimizer, optimizer_state)


def for_policies(per_policy: dict[str, Any]) -> Any:
    """What one policy is given alone (its engine samples every seat, its state is the checkpoint's
    top level), or, for several, the mapping name -> it (a game samples each seat with its owner's engine)."""
    return next(iter(per_policy.values())) if len(per_policy) == 1 else per_policy


def each(part: Any) -> list:
    """The parts `for_policies` made: one, or the mapping's values."""
    return list(part.values()) if isinstance(part, dict) else [part]


def per_policy(part: Any, fn) -> Any:
    """`fn` of each part `for_policies` made, in the same shape (one, or name -> fn(part))."""
    return {name: fn(own) for name, own in part.items()} if isinstance(part, dict) else fn(part)


def policy_path(root: Path, name: str, several: bool) -> Path:
    """Where a policy's model goes under `root` (final/, warm_start/, a checkpoint's model/)."""
    return root / name if several else root


def metric_prefix(name: str, several: bool) -> str:
    return f"policy/{name}/" if several else ""


def owner(trajectory: Trajectory, task: Task, env) -> str:
    """The policy that played a game trajectory's seat (its `agent` is the seat's role)."""
    roles = env.game(task.metadata["game"]).roles
    return task.metadata["seats"][roles.index(trajectory.agent)]


class PolicyModels:
    """Several policies saved as one checkpoint's `model/`: one Hugging Face directory per policy
    (a LoRA policy's adapter, as peft saves it)."""

    def __init__(self, models: dict, tokenizer):
        self.models, self.tokenizer = models, tokenizer

    def save_pretrained(self, directory: Path) -> None:
        for name, model in self.models.items():
            model.save_pretrained(Path(directory) / name)
            self.tokenizer.save_pretrained(Path(directory) / name)


class PrefixedLogger:
    """A logger that writes every metric under `prefix` (a policy's warm-up: `policy/<name>/`)."""

    def __init__(self, logger, prefix: str):
        self.logger, self.prefix = logger, prefix

    def log(self, step: int, metrics, stage: str) -> None:
        self.logger.log(step, {f"{self.prefix}{k}": v for k, v in metrics.items()}, stage=stage)
