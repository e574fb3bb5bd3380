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

Its state (the data cursor, the value model with its optimizer and replay buffer, the bandit, the
predictions pending for sampled groups, the reliability counts, the draw versions) is part of every
checkpoint, so a resumed run selects the same prompts and predicts the same values as one never
interrupted.

The parts, one idea each: a value model per policy and its predictions (`policy_values`), the
predictions waiting for their outcomes (`pending_predictions`), what the models learn from the outcomes
(`value_learning`), the versions the async producer draws with (`draw_versions`, which says who draws
with what and why), DUMP's distributions (`dump`), and which sampler a config asks for (`sampler_factory`).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Mapping

import torch

from reinforge.config import PromptValueConfig
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task
from reinforge.tasks.task_sampler import TaskSampler
from reinforge.values.draw_versions import version_now, version_to_draw, versions_from_state, versions_state
from reinforge.values.dump import DistributionBandit, distribution_name, tasks_by_distribution
from reinforge.values.group_advantages import group_abs_advantages  # noqa: F401 (importable from here, as before the split)
from reinforge.values.item_seats import ItemSeat, SeatsOf, one_seat, seat_outcomes
from reinforge.values.pending_predictions import Pending, oldest_predictions, pending_from_state, take_predictions
from reinforge.values.policy_values import ONE_POLICY, Featurize, per_policy, predict_seats, value_models
from reinforge.values.selection import mean_per_item, nearest_items
from reinforge.values.value_learning import empty_reliability, learn_outcomes
from reinforge.values.value_model import PromptValueModel


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
        self.values = value_models(self.featurizers, per_policy(embed_dim), cfg, seed)  # one per policy, each predicts its own seats
        self.seats_of = seats_of or one_seat(next(iter(self.featurizers), ONE_POLICY))
        self.prefixes = dict(metric_prefixes or dict.fromkeys(self.values, ""))
        self.bandit: DistributionBandit | None = None
        self.by_distribution: dict[str, TaskSampler] = {}
        if cfg.curriculum == "dump":
            grouped = tasks_by_distribution(tasks, cfg.dump_key)
            self.bandit = DistributionBandit(list(grouped), cfg.dump_c, cfg.dump_window, cfg.dump_temperature, seed + 2)
            self.by_distribution = {name: TaskSampler(members, seed + 3 + i) for i, (name, members) in enumerate(grouped.items())}
        self.pending: Pending = {}  # predictions made at draw time, until their groups' outcomes come back
        self.lock = threading.Lock()  # `pending` and `versions`: the async producer adds, the learner's thread takes
        self.reliabilities = {name: empty_reliability() for name in self.values}
        self.draw_metrics: dict[str, float] = {}
        # Versioned draws (the async schedule): step t -> what observe(step=t) left, frozen (reinforge.values.draw_versions).
        self.versioned = False
        self.versions: dict[int, dict] = {}
        self.draw_index: int | None = None  # the version the next draws use (the sampling weights' step)
        self.draw_model = None  # the model that featurizes them (the producer's engine copy; per policy name with several); None: the featurizer's own

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

    # ------------------------------------------------------------------ versions

    def start_versions(self, index: int) -> None:
        """Draw by versions from now on; the current state is version `index` (the weights the run starts from)."""
        self.versioned = True
        with self.lock:
            self.versions.setdefault(index, version_now(self.values, self.bandit))

    def _draw_version(self) -> dict | None:
        """The version the next draw uses (None: the live state, unversioned draws)."""
        if not self.versioned:
            return None
        with self.lock:
            return version_to_draw(self.versions, self.draw_index)

    def take_draw_metrics(self) -> dict[str, float]:
        """The value/* metrics of the draws since the last call (the collector reports them with its batch)."""
        metrics, self.draw_metrics = self.draw_metrics, {}
        return metrics

    # ------------------------------------------------------------------ drawing

    def _draw(self, size: int, version: dict | None) -> list[Task]:
        if self.bandit is not None:
            names = self.bandit.draw(size, version["windows"] if version is not None else None)
            if version is not None:  # under async the learner's thread cannot read the producer's counts: logged here
                self.draw_metrics.update({f"dump/prob/{n}": p for n, p in zip(self.bandit.names, self.bandit.probabilities(version["windows"]))})
            return [self.by_distribution[name].next_batch(1)[0] for name in names]
        return self.base.next_batch(size * (self.cfg.pool_factor if self.cfg.curriculum == "pcl" else 1))

    def _predict(self, seats: list[ItemSeat], values: dict[str, PromptValueModel] | None = None) -> tuple[list, torch.Tensor, list]:
        """Each seat's embedding, prediction and summary (`values`: the live models, or a version's)."""
        return predict_seats(seats, self.featurizers, values or self.values, self.draw_model)

    def next_batch(self, size: int) -> list[Task]:
        if size == 0:  # (partial rollouts top up an in-flight pool that may already be full)
            return []
        version = self._draw_version()
        pool = self._draw(size, version)
        if not self.values:
            return pool
        per_item = [self.seats_of(task) for task in pool]
        if not all(per_item):
            empty = next(task for task, seats in zip(pool, per_item) if not seats)
            raise ValueError(f"task {empty.id} has no trained seat: nothing of it is a policy's outcome")
        seats = [s for item in per_item for s in item]
        owner = torch.tensor([i for i, item in enumerate(per_item) for _ in item])
        start = time.perf_counter()
        embeddings, predicted, summaries = self._predict(seats, version["value"] if version is not None else self.values)
        feature_seconds = time.perf_counter() - start
        # An item's distance from the target: the mean over its trained seats (one seat: |p - target|).
        distance = mean_per_item((predicted - self.cfg.target).abs(), owner, len(pool))
        chosen = nearest_items(distance, size) if self.cfg.curriculum == "pcl" else list(range(size))
        chosen_seats = [j for i in chosen for j in range(len(seats)) if owner[j] == i]
        with self.lock:
            for j in chosen_seats:
                self.pending.setdefault(seats[j].key, []).append((embeddings[j], summaries[j], predicted[j].item(), seats[j].policy))
        self.draw_metrics = {**self.draw_metrics,
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
        with self.lock:
            oldest = oldest_predictions(self.pending, trajectories)
        tau2 = {name: model.prior_variance(self.cfg.prior_var_floor) for name, model in self.values.items()}
        values = torch.tensor([entry[2] for entry in oldest], dtype=torch.float64)
        variances = torch.tensor([tau2[entry[3]] for entry in oldest], dtype=torch.float64)
        return {"prompt_values": values, "prompt_value_var": variances, "prior_test_z": self.cfg.prior_test_z}

    def observe(self, trajectories: list[Trajectory], advantages: dict[int, float] | None = None, step: int | None = None) -> dict[str, float]:
        """Learn from the outcomes of the groups in `trajectories` (those the step trains, those dynamic
        sampling dropped, partial groups drawn steps ago; every seat of every game of them, once: call
        it once per step; reinforge.values.pending_predictions says why all of them); `advantages`: mean
        |advantage| per group id (DUMP). With `step`, under versioned draws, what it leaves becomes version `step`."""
        by_group: dict[int, list[Trajectory]] = defaultdict(list)
        for t in trajectories:
            by_group[t.group_id].append(t)
        if self.values:
            with self.lock:
                entries = take_predictions(self.pending, trajectories)
        else:
            entries = {}
        groups: dict[int, list[Trajectory]] = {}
        for group_id, members in by_group.items():
            members = [t for t in members if not t.reward_failures]  # a failed reward is no outcome of the policy's
            if members:
                groups[group_id] = members
        metrics: dict[str, float] = {}
        if self.bandit is not None and advantages:
            by_task = {t.id: t for t in self.tasks}
            for group_id, members in groups.items():
                if group_id in advantages:
                    self.bandit.observe(distribution_name(by_task[members[0].task_id], self.cfg.dump_key), advantages[group_id])
            if not self.versioned:  # (versioned: the draw logs them, see _draw)
                for name, p in zip(self.bandit.names, self.bandit.probabilities()):
                    metrics[f"dump/prob/{name}"] = p
        if self.values and groups:
            outcomes = seat_outcomes(trajectories, self.cfg.component)
            metrics.update(learn_outcomes(self.values, self.reliabilities, self.prefixes, outcomes, entries, self.cfg.prior_var_floor))
        if self.versioned and step is not None:
            version = version_now(self.values, self.bandit)
            with self.lock:
                self.versions[step] = version
        return metrics

    # ------------------------------------------------------------------ checkpoint

    def state_dict(self) -> dict:
        models = {name: {"value": m.state_dict(), "reliability": self.reliabilities[name].clone()} for name, m in self.values.items()}
        state = {
            "base": self.base.state_dict(),
            "bandit": self.bandit.state_dict() if self.bandit is not None else None,
            "by_distribution": {k: s.state_dict() for k, s in self.by_distribution.items()},
            "pending": {key: list(queue) for key, queue in self.pending.items()},
            "draw_metrics": dict(self.draw_metrics),
            "versions": versions_state(self.versions),
        }
        if len(models) > 1:  # several policies: a value model each
            return {**state, "value": None, "reliability": None, "policies": models}
        one = next(iter(models.values()), {"value": None, "reliability": empty_reliability()})
        return {**state, **one}  # one policy: the layout of runs before several

    def load_state_dict(self, state: dict) -> None:
        if "base" not in state:  # a checkpoint of a run without this section: its data cursor only
            self.base.load_state_dict(state)
            return
        self.base.load_state_dict(state["base"])
        names = list(self.values)
        saved = state.get("policies") or ({names[0]: state} if len(names) == 1 else {})
        for name, model in self.values.items():
            if name in saved and saved[name]["value"] is not None:
                model.load_state_dict(saved[name]["value"])
                self.reliabilities[name] = saved[name]["reliability"].clone()
        if self.bandit is not None and state["bandit"] is not None:
            self.bandit.load_state_dict(state["bandit"])
            for name, s in state["by_distribution"].items():
                self.by_distribution[name].load_state_dict(s)
        self.pending = pending_from_state(state["pending"], next(iter(names), None))
        self.draw_metrics = dict(state["draw_metrics"])
        self.versions = versions_from_state(state.get("versions", {}), self.values)
