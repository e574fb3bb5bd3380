"""The trainer's task sampler with the prompt-value model behind it: uniform, PCL or DUMP.

Same interface as reinforge.tasks.task_sampler.TaskSampler (`next_batch`, `state_dict`,
`load_state_dict`), so the rollout schedule and dynamic sampling draw from it unchanged, plus what the
loop calls around an update:

- `prompt_prior(trajectories)`: each sample's predicted pass rate and the prior's error variance, for
  the v05_prior baseline (reinforge.algos.advantages.value_prior);
- `observe(trajectories, advantages)`: every group's outcome trains the value model, its predictions
  from before sampling are scored (value/brier, the reliability curve), and DUMP's bandit learns each
  distribution's mean |advantage|. Returns the step's value/* metrics.

An item (a task) may be played by several trained seats, each with its own outcome and, with several
policies, its own policy's value model (reinforge.values.item_seats): predictions, outcomes and
metrics are per seat, and PCL keeps the items whose seats are predicted nearest the target on average.
One seat per item (every env but a game) is the case this sampler was written for, unchanged.

Its state (the data cursor, the value models with their optimizers and replay buffers, the bandit, the
predictions pending for sampled groups, the reliability counts) is part of every checkpoint, so a
resumed run selects the same prompts and predicts the same values as one never interrupted.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Mapping

import torch

from reinforge.config import PromptValueConfig
from reinforge.values.calibration import brier_score, reliability_counts
from reinforge.values.dump import DistributionBandit
from reinforge.values.item_seats import ItemSeat, SeatsOf, game_seats, one_seat, seat_key, seat_outcomes
from reinforge.values.selection import nearest_items
from reinforge.values.value_model import PromptValueModel
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task
from reinforge.tasks.task_sampler import TaskSampler

Featurize = Callable[[list[Task]], torch.Tensor]  # tasks -> [K, d] prompt representations
RELIABILITY_BINS = 10
ONE_POLICY = "policy"  # the policy's name when the caller names none (a run of one policy)


def distribution_name(task: Task, key: str) -> str:
    if key not in task.metadata:
        raise ValueError(f"task {task.id} has no metadata key {key!r} (prompt_value.dump_key); its keys: {sorted(task.metadata)}")
    return str(task.metadata[key])


def per_policy(value) -> dict:
    """One policy's featurizer / width given alone, or a mapping policy name -> it."""
    if value is None:
        return {}
    return dict(value) if isinstance(value, Mapping) else {ONE_POLICY: value}


class CurriculumSampler:
    def __init__(
        self, tasks: list[Task], seed: int, cfg: PromptValueConfig, featurize: Featurize | Mapping[str, Featurize] | None,
        embed_dim: int | Mapping[str, int] | None, seats_of: SeatsOf | None = None, metric_prefixes: Mapping[str, str] | None = None,
    ):
        if cfg.enabled and (featurize is None or embed_dim is None):
            raise ValueError("prompt_value.enabled needs a featurizer (the policy's prompt states) and its width")
        self.cfg = cfg
        self.tasks = tasks
        self.base = TaskSampler(tasks, seed)
        self.featurizers = per_policy(featurize)
        dims = per_policy(embed_dim)
        if sorted(dims) != sorted(self.featurizers):
            raise ValueError(f"a featurizer and a width per policy: featurizers for {sorted(self.featurizers)}, widths for {sorted(dims)}")
        # One value model per policy (each predicts its own seats' success), seeded alike.
        self.values = {
            name: PromptValueModel(dims[name], cfg.hidden, cfg.lr, cfg.updates_per_step, cfg.buffer_groups, cfg.memory_groups, seed + 1)
            for name in self.featurizers
        } if cfg.enabled else {}
        self.seats_of = seats_of or one_seat(next(iter(self.featurizers), ONE_POLICY))
        self.prefixes = dict(metric_prefixes or dict.fromkeys(self.values, ""))
        self.bandit: DistributionBandit | None = None
        self.by_distribution: dict[str, TaskSampler] = {}
        if cfg.curriculum == "dump":
            grouped: dict[str, list[Task]] = defaultdict(list)
            for task in tasks:
                grouped[distribution_name(task, cfg.dump_key)].append(task)
            names = sorted(grouped)
            self.bandit = DistributionBandit(names, cfg.dump_c, cfg.dump_window, cfg.dump_temperature, seed + 2)
            self.by_distribution = {name: TaskSampler(grouped[name], seed + 3 + i) for i, name in enumerate(names)}
        # Predictions made when an item was drawn, per seat key, until its group's outcome comes back:
        # (embedding, summary, predicted pass rate, policy).
        self.pending: dict[str, tuple[torch.Tensor, torch.Tensor, float, str]] = {}
        self.reliabilities = {name: torch.zeros(RELIABILITY_BINS, 3, dtype=torch.float64) for name in self.values}
        self.draw_metrics: dict[str, float] = {}

    @property
    def value(self) -> PromptValueModel | None:
        """The value model of a run of one policy."""
        if len(self.values) > 1:
            raise ValueError(f"{len(self.values)} policies have a value model each: use .values[name]")
        return next(iter(self.values.values()), None)

    @property
    def reliability(self) -> torch.Tensor:
        """The reliability counts of a run of one policy."""
        (counts,) = self.reliabilities.values()
        return counts

    # ------------------------------------------------------------------ drawing

    def _draw(self, size: int) -> list[Task]:
        if self.bandit is not None:
            names = self.bandit.draw(size)
            return [self.by_distribution[name].next_batch(1)[0] for name in names]
        return self.base.next_batch(size * (self.cfg.pool_factor if self.cfg.curriculum == "pcl" else 1))

    def _predict(self, seats: list[ItemSeat]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Each seat's embedding, prediction and summary, by its policy's featurizer and value model."""
        embeddings: list = [None] * len(seats)
        predicted = torch.zeros(len(seats), dtype=torch.float64)
        summaries: list = [None] * len(seats)
        for name, model in self.values.items():
            rows = [i for i, s in enumerate(seats) if s.policy == name]
            if not rows:
                continue
            features = self.featurizers[name]([seats[i].view for i in rows])
            p, summary = model.predict(features)
            for k, i in enumerate(rows):
                embeddings[i], summaries[i] = features[k], summary[k]
            predicted[rows] = p.double()
        return embeddings, predicted, summaries

    def next_batch(self, size: int) -> list[Task]:
        pool = self._draw(size)
        if not self.values:
            return pool
        per_item = [self.seats_of(task) for task in pool]
        if not all(per_item):
            empty = next(task for task, seats in zip(pool, per_item) if not seats)
            raise ValueError(f"task {empty.id} has no trained seat: nothing of it is a policy's outcome")
        seats = [s for item in per_item for s in item]
        owner = torch.tensor([i for i, item in enumerate(per_item) for _ in item])
        start = time.perf_counter()
        embeddings, predicted, summaries = self._predict(seats)
        feature_seconds = time.perf_counter() - start
        # An item's distance from the target: the mean over its trained seats (one seat: |p - target|).
        gaps = (predicted - self.cfg.target).abs()
        distance = torch.zeros(len(pool), dtype=torch.float64).index_add_(0, owner, gaps)
        distance = distance / torch.bincount(owner, minlength=len(pool)).double()
        chosen = nearest_items(distance, size) if self.cfg.curriculum == "pcl" else list(range(size))
        chosen_seats = [j for i in chosen for j in range(len(seats)) if owner[j] == i]
        for j in chosen_seats:
            self.pending[seats[j].key] = (embeddings[j], summaries[j], predicted[j].item(), seats[j].policy)
        self.draw_metrics = {
            "value/feature_seconds": self.draw_metrics.get("value/feature_seconds", 0.0) + feature_seconds,
            "value/pool_pred_mean": predicted.mean().item(),
            "value/selected_pred_mean": predicted[chosen_seats].mean().item(),
            # How far the items are predicted from the target: the pool's, and the kept items' (PCL keeps the nearest).
            "value/pool_distance": distance.mean().item(),
            "value/selected_distance": distance[chosen].mean().item(),
        }
        return [pool[i] for i in chosen]

    # ------------------------------------------------------------------ after sampling

    def prompt_prior(self, trajectories: list[Trajectory]) -> dict:
        """AdvantageInputs fields of the v05_prior baseline: per sample, its prompt's predicted pass
        rate and tau^2 (the same for all of a policy's: its model's recent excess squared error), and the test's z."""
        if not self.values:
            raise ValueError("the v05_prior baseline needs the prompt-value model: set prompt_value.enabled=true")
        keys = [seat_key(t.task_id, t.agent) for t in trajectories]
        missing = sorted({t.task_id for t, key in zip(trajectories, keys) if key not in self.pending})
        if missing:
            raise ValueError(f"no prediction was made before sampling task(s) {missing[:3]}")
        tau2 = {name: model.prior_variance(self.cfg.prior_var_floor) for name, model in self.values.items()}
        values = torch.tensor([self.pending[key][2] for key in keys], dtype=torch.float64)
        variances = torch.tensor([tau2[self.pending[key][3]] for key in keys], dtype=torch.float64)
        return {"prompt_values": values, "prompt_value_var": variances, "prior_test_z": self.cfg.prior_test_z}

    def observe(self, trajectories: list[Trajectory], advantages: dict[int, float] | None = None) -> dict[str, float]:
        """Learn from the step's groups (every seat of every game of them, once: call it once per step);
        `advantages`: mean |advantage| per group id (DUMP)."""
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
        if self.values and groups:
            metrics.update(self._learn(seat_outcomes(trajectories, self.cfg.component)))
        self.pending.clear()
        return metrics

    def _learn(self, outcomes: dict[tuple[int, str], list[float]]) -> dict[str, float]:
        missing = sorted({key for _, key in outcomes} - set(self.pending))
        if missing:  # every group the loop trains on was drawn through next_batch, which predicted it
            raise ValueError(f"no prediction was made before sampling task(s) {missing[:3]}: were they drawn from another sampler?")
        metrics = dict(self.draw_metrics)
        for name, model in self.values.items():
            mine = [(self.pending[key], seat) for (_, key), seat in outcomes.items() if self.pending[key][3] == name]
            if mine:
                metrics.update({self.prefixes[name] + k: v for k, v in self._learn_policy(name, model, mine).items()})
        self.draw_metrics = {}
        return metrics

    def _learn_policy(self, name: str, model: PromptValueModel, units: list[tuple[tuple, list[float]]]) -> dict[str, float]:
        """One policy's seats of the step: score the predictions made before sampling, then train on the outcomes."""
        entries = [entry for entry, _ in units]
        outcomes = [seat for _, seat in units]
        per_sample_pred = torch.tensor([e[2] for e, o in zip(entries, outcomes) for _ in o], dtype=torch.float64)
        per_sample_outcome = torch.tensor([y for o in outcomes for y in o], dtype=torch.float64)
        rates = torch.tensor([sum(o) / len(o) for o in outcomes], dtype=torch.float64)
        sizes = torch.tensor([len(o) for o in outcomes])
        self.reliabilities[name] += reliability_counts(per_sample_pred, per_sample_outcome, RELIABILITY_BINS)
        constant = per_sample_outcome.mean().expand_as(per_sample_outcome)
        predictions = torch.tensor([e[2] for e in entries], dtype=torch.float64)
        metrics = {
            "value/brier": brier_score(per_sample_pred, per_sample_outcome),
            "value/brier_constant": brier_score(constant, per_sample_outcome),  # hindsight's batch mean: the bar to beat
            "value/pred_mean": per_sample_pred.mean().item(),
            "value/pass_rate": per_sample_outcome.mean().item(),
            "value/prior_var": model.prior_variance(self.cfg.prior_var_floor),
        }
        model.observe(torch.stack([e[0] for e in entries]), torch.stack([e[1] for e in entries]), predictions, rates, sizes)
        start = time.perf_counter()
        metrics["value/loss"] = model.fit()
        metrics["value/train_seconds"] = time.perf_counter() - start
        for k, (p, y, n) in enumerate(reliability_curve_by_bin(self.reliabilities[name])):
            if n:
                metrics[f"value/reliability/pred_{k}"], metrics[f"value/reliability/obs_{k}"] = p, y
                metrics[f"value/reliability/n_{k}"] = float(n)
        return metrics

    # ------------------------------------------------------------------ checkpoint

    def state_dict(self) -> dict:
        models = {name: {"value": m.state_dict(), "reliability": self.reliabilities[name].clone()} for name, m in self.values.items()}
        state = {
            "base": self.base.state_dict(),
            "bandit": self.bandit.state_dict() if self.bandit is not None else None,
            "by_distribution": {k: s.state_dict() for k, s in self.by_distribution.items()},
            "pending": dict(self.pending),
            "draw_metrics": dict(self.draw_metrics),
        }
        if len(models) > 1:  # several policies: a value model each
            return {**state, "value": None, "reliability": None, "policies": models}
        one = next(iter(models.values()), {"value": None, "reliability": torch.zeros(RELIABILITY_BINS, 3, dtype=torch.float64)})
        return {**state, **one}  # one policy: the layout of runs before several

    def load_state_dict(self, state: dict) -> None:
        if "base" not in state:  # a checkpoint of a run without this section: its data cursor only
            self.base.load_state_dict(state)
            return
        self.base.load_state_dict(state["base"])
        saved = state.get("policies") or ({next(iter(self.values)): state} if len(self.values) == 1 else {})
        for name, model in self.values.items():
            if name in saved and saved[name]["value"] is not None:
                model.load_state_dict(saved[name]["value"])
                self.reliabilities[name] = saved[name]["reliability"].clone()
        if self.bandit is not None and state["bandit"] is not None:
            self.bandit.load_state_dict(state["bandit"])
            for name, s in state["by_distribution"].items():
                self.by_distribution[name].load_state_dict(s)
        self.pending = dict(state["pending"])
        self.draw_metrics = dict(state["draw_metrics"])


def reliability_curve_by_bin(counts: torch.Tensor) -> list[tuple[float, float, int]]:
    """(mean prediction, observed rate, samples) per bin, (0, 0, 0) for an empty one."""
    return [(p / n, y / n, int(n)) if n > 0 else (0.0, 0.0, 0) for p, y, n in counts.tolist()]


def make_task_sampler(
    tasks: list[Task], seed: int, cfg: PromptValueConfig, models: Mapping | None = None, env=None, env_type: str = "single_turn",
    metric_prefixes: Mapping[str, str] | None = None,
) -> TaskSampler | CurriculumSampler:
    """The plain shuffled sampler unless the prompt_value section asks for more. `models`: each
    policy's model by name (its prompt states are its value model's features)."""
    if not cfg.enabled and cfg.curriculum == "uniform":
        return TaskSampler(tasks, seed)
    featurizers = dims = None
    seats_of = None
    if cfg.enabled:
        from reinforge.values.features import prompt_states

        pad = env.tokenizer.pad_token_id

        def featurizer(model) -> Featurize:
            return lambda batch: prompt_states(model, env, batch, pad)

        featurizers = {name: featurizer(model) for name, model in models.items()}
        dims = {name: model.config.hidden_size for name, model in models.items()}
        seats_of = game_seats(env) if env_type == "game" else one_seat(next(iter(models)))
    return CurriculumSampler(tasks, seed, cfg, featurizers, dims, seats_of, metric_prefixes)


def group_abs_advantages(trajectories: list[Trajectory], advantages: torch.Tensor, mask: torch.Tensor) -> dict[int, float]:
    """Mean |advantage| of each group's samples (a per-token advantage: its mean over sampled tokens)."""
    return merged_group_abs_advantages([(trajectories, advantages, mask)])


def merged_group_abs_advantages(parts: list[tuple[list[Trajectory], torch.Tensor, torch.Tensor]]) -> dict[int, float]:
    """The same over several batches (trajectories, advantages, loss mask): each policy's, where a
    game's group holds the rows of every policy that plays it."""
    sums: dict[int, list[float]] = defaultdict(list)
    for trajectories, advantages, mask in parts:
        per_sample = advantages.double().abs()
        if per_sample.dim() == 2:
            m = mask.double()
            per_sample = (per_sample * m).sum(1) / m.sum(1).clamp(min=1)
        for t, a in zip(trajectories, per_sample.tolist()):
            sums[t.group_id].append(a)
    return {g: sum(v) / len(v) for g, v in sums.items()}
