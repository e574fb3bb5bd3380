"""The trainer's task sampler with the prompt-value model behind it: uniform, PCL or DUMP.

Same interface as reinforge.tasks.task_sampler.TaskSampler (`next_batch`, `state_dict`,
`load_state_dict`), so the rollout schedule and dynamic sampling draw from it unchanged, plus what the
loop calls around an update:

- `prompt_prior(trajectories)`: each sample's predicted pass rate and the prior's error variance, for
  the v05_prior baseline (reinforge.algos.advantages.value_prior);
- `observe(trajectories, advantages)`: every group's outcome trains the value model, its predictions
  from before sampling are scored (value/brier, the reliability curve), and DUMP's bandit learns each
  distribution's mean |advantage|. Returns the step's value/* metrics.

Its state (the data cursor, the value model with its optimizer and replay buffer, the bandit, the
predictions pending for sampled groups, the reliability counts) is part of every checkpoint, so a
resumed run selects the same prompts and predicts the same values as one never interrupted.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable

import torch

from reinforge.config import PromptValueConfig
from reinforge.values.calibration import brier_score, reliability_counts
from reinforge.values.dump import DistributionBandit
from reinforge.values.selection import nearest_to_target
from reinforge.values.value_model import PromptValueModel
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task
from reinforge.tasks.task_sampler import TaskSampler

Featurize = Callable[[list[Task]], torch.Tensor]  # tasks -> [K, d] prompt representations
RELIABILITY_BINS = 10


def distribution_name(task: Task, key: str) -> str:
    if key not in task.metadata:
        raise ValueError(f"task {task.id} has no metadata key {key!r} (prompt_value.dump_key); its keys: {sorted(task.metadata)}")
    return str(task.metadata[key])


def success(trajectory: Trajectory, component: str | None) -> float:
    """A sample's success in [0, 1]: the named component's score, or the total reward, clipped."""
    value = trajectory.reward if component is None else trajectory.rewards[component]
    return min(1.0, max(0.0, float(value)))


class CurriculumSampler:
    def __init__(self, tasks: list[Task], seed: int, cfg: PromptValueConfig, featurize: Featurize | None, embed_dim: int | None):
        if cfg.enabled and (featurize is None or embed_dim is None):
            raise ValueError("prompt_value.enabled needs a featurizer (the policy's prompt states) and its width")
        self.cfg = cfg
        self.tasks = tasks
        self.base = TaskSampler(tasks, seed)
        self.featurize = featurize
        self.value = (
            PromptValueModel(embed_dim, cfg.hidden, cfg.lr, cfg.updates_per_step, cfg.buffer_groups, cfg.memory_groups, seed + 1)
            if cfg.enabled else None
        )
        self.bandit: DistributionBandit | None = None
        self.by_distribution: dict[str, TaskSampler] = {}
        if cfg.curriculum == "dump":
            grouped: dict[str, list[Task]] = defaultdict(list)
            for task in tasks:
                grouped[distribution_name(task, cfg.dump_key)].append(task)
            names = sorted(grouped)
            self.bandit = DistributionBandit(names, cfg.dump_c, cfg.dump_window, cfg.dump_temperature, seed + 2)
            self.by_distribution = {name: TaskSampler(grouped[name], seed + 3 + i) for i, name in enumerate(names)}
        # Predictions made when a task was drawn, until its group's outcome comes back.
        self.pending: dict[str, tuple[torch.Tensor, torch.Tensor, float]] = {}
        self.reliability = torch.zeros(RELIABILITY_BINS, 3, dtype=torch.float64)
        self.draw_metrics: dict[str, float] = {}

    # ------------------------------------------------------------------ drawing

    def _draw(self, size: int) -> list[Task]:
        if self.bandit is not None:
            names = self.bandit.draw(size)
            return [self.by_distribution[name].next_batch(1)[0] for name in names]
        return self.base.next_batch(size * (self.cfg.pool_factor if self.cfg.curriculum == "pcl" else 1))

    def next_batch(self, size: int) -> list[Task]:
        pool = self._draw(size)
        if self.value is None:
            return pool
        start = time.perf_counter()
        embeddings = self.featurize(pool)
        feature_seconds = time.perf_counter() - start
        predicted, summaries = self.value.predict(embeddings)
        chosen = nearest_to_target(predicted, size, self.cfg.target) if self.cfg.curriculum == "pcl" else list(range(size))
        for i in chosen:
            self.pending[pool[i].id] = (embeddings[i], summaries[i], predicted[i].item())
        self.draw_metrics = {
            "value/feature_seconds": self.draw_metrics.get("value/feature_seconds", 0.0) + feature_seconds,
            "value/pool_pred_mean": predicted.mean().item(),
            "value/selected_pred_mean": predicted[chosen].mean().item(),
        }
        return [pool[i] for i in chosen]

    # ------------------------------------------------------------------ after sampling

    def prompt_prior(self, trajectories: list[Trajectory]) -> dict:
        """AdvantageInputs fields of the v05_prior baseline: per sample, its prompt's predicted pass
        rate and tau^2 (the same for all: the model's recent excess squared error), and the test's z."""
        if self.value is None:
            raise ValueError("the v05_prior baseline needs the prompt-value model: set prompt_value.enabled=true")
        missing = sorted({t.task_id for t in trajectories} - set(self.pending))
        if missing:
            raise ValueError(f"no prediction was made before sampling task(s) {missing[:3]}")
        tau2 = self.value.prior_variance(self.cfg.prior_var_floor)
        values = torch.tensor([self.pending[t.task_id][2] for t in trajectories], dtype=torch.float64)
        return {"prompt_values": values, "prompt_value_var": torch.full_like(values, tau2), "prior_test_z": self.cfg.prior_test_z}

    def observe(self, trajectories: list[Trajectory], advantages: dict[int, float] | None = None) -> dict[str, float]:
        """Learn from the step's groups; `advantages`: mean |advantage| per group id (DUMP)."""
        groups: dict[int, list[Trajectory]] = defaultdict(list)
        for t in trajectories:
            if not t.reward_failures:  # a failed reward is no outcome of the policy's
                groups[t.group_id].append(t)
        metrics: dict[str, float] = {}
        if self.bandit is not None and advantages:
            by_task = {t.id: t for t in self.tasks}
            for group_id, members in groups.items():
                if group_id in advantages:
                    self.bandit.observe(distribution_name(by_task[members[0].task_id], self.cfg.dump_key), advantages[group_id])
            for name, p in zip(self.bandit.names, self.bandit.probabilities()):
                metrics[f"dump/prob/{name}"] = p
        if self.value is not None and groups:
            metrics.update(self._learn(groups))
        self.pending.clear()
        return metrics

    def _learn(self, groups: dict[int, list[Trajectory]]) -> dict[str, float]:
        component = self.cfg.component
        missing = sorted({m[0].task_id for m in groups.values()} - set(self.pending))
        if missing:  # every group the loop trains on was drawn through next_batch, which predicted it
            raise ValueError(f"no prediction was made before sampling task(s) {missing[:3]}: were they drawn from another sampler?")
        outcomes = [[success(t, component) for t in members] for members in groups.values()]
        entries = [self.pending[members[0].task_id] for members in groups.values()]
        per_sample_pred = torch.tensor([e[2] for e, o in zip(entries, outcomes) for _ in o], dtype=torch.float64)
        per_sample_outcome = torch.tensor([y for o in outcomes for y in o], dtype=torch.float64)
        rates = torch.tensor([sum(o) / len(o) for o in outcomes], dtype=torch.float64)
        sizes = torch.tensor([len(o) for o in outcomes])
        self.reliability += reliability_counts(per_sample_pred, per_sample_outcome, RELIABILITY_BINS)
        constant = per_sample_outcome.mean().expand_as(per_sample_outcome)
        predictions = torch.tensor([e[2] for e in entries], dtype=torch.float64)
        metrics = {
            "value/brier": brier_score(per_sample_pred, per_sample_outcome),
            "value/brier_constant": brier_score(constant, per_sample_outcome),  # hindsight's batch mean: the bar to beat
            "value/pred_mean": per_sample_pred.mean().item(),
            "value/pass_rate": per_sample_outcome.mean().item(),
            "value/prior_var": self.value.prior_variance(self.cfg.prior_var_floor),
            **self.draw_metrics,
        }
        self.value.observe(torch.stack([e[0] for e in entries]), torch.stack([e[1] for e in entries]), predictions, rates, sizes)
        start = time.perf_counter()
        metrics["value/loss"] = self.value.fit()
        metrics["value/train_seconds"] = time.perf_counter() - start
        for k, (p, y, n) in enumerate(reliability_curve_by_bin(self.reliability)):
            if n:
                metrics[f"value/reliability/pred_{k}"], metrics[f"value/reliability/obs_{k}"] = p, y
                metrics[f"value/reliability/n_{k}"] = float(n)
        self.draw_metrics = {}
        return metrics

    # ------------------------------------------------------------------ checkpoint

    def state_dict(self) -> dict:
        return {
            "base": self.base.state_dict(),
            "value": self.value.state_dict() if self.value is not None else None,
            "bandit": self.bandit.state_dict() if self.bandit is not None else None,
            "by_distribution": {k: s.state_dict() for k, s in self.by_distribution.items()},
            "pending": dict(self.pending),
            "reliability": self.reliability.clone(),
            "draw_metrics": dict(self.draw_metrics),
        }

    def load_state_dict(self, state: dict) -> None:
        if "base" not in state:  # a checkpoint of a run without this section: its data cursor only
            self.base.load_state_dict(state)
            return
        self.base.load_state_dict(state["base"])
        if self.value is not None and state["value"] is not None:
            self.value.load_state_dict(state["value"])
        if self.bandit is not None and state["bandit"] is not None:
            self.bandit.load_state_dict(state["bandit"])
            for name, s in state["by_distribution"].items():
                self.by_distribution[name].load_state_dict(s)
        self.pending = dict(state["pending"])
        self.reliability = state["reliability"].clone()
        self.draw_metrics = dict(state["draw_metrics"])


def reliability_curve_by_bin(counts: torch.Tensor) -> list[tuple[float, float, int]]:
    """(mean prediction, observed rate, samples) per bin, (0, 0, 0) for an empty one."""
    return [(p / n, y / n, int(n)) if n > 0 else (0.0, 0.0, 0) for p, y, n in counts.tolist()]


def make_task_sampler(tasks: list[Task], seed: int, cfg: PromptValueConfig, model=None, env=None) -> TaskSampler | CurriculumSampler:
    """The plain shuffled sampler unless the prompt_value section asks for more."""
    if not cfg.enabled and cfg.curriculum == "uniform":
        return TaskSampler(tasks, seed)
    featurize = embed_dim = None
    if cfg.enabled:
        from reinforge.values.features import prompt_states

        pad = env.tokenizer.pad_token_id

        def featurize(batch: list[Task]) -> torch.Tensor:
            return prompt_states(model, env, batch, pad)

        embed_dim = model.config.hidden_size
    return CurriculumSampler(tasks, seed, cfg, featurize, embed_dim)


def group_abs_advantages(trajectories: list[Trajectory], advantages: torch.Tensor, mask: torch.Tensor) -> dict[int, float]:
    """Mean |advantage| of each group's samples (a per-token advantage: its mean over sampled tokens)."""
    per_sample = advantages.double().abs()
    if per_sample.dim() == 2:
        m = mask.double()
        per_sample = (per_sample * m).sum(1) / m.sum(1).clamp(min=1)
    sums: dict[int, list[float]] = defaultdict(list)
    for t, a in zip(trajectories, per_sample.tolist()):
        sums[t.group_id].append(a)
    return {g: sum(v) / len(v) for g, v in sums.items()}
