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
predictions pending for sampled groups, the reliability counts, the versions below) is part of every
checkpoint, so a resumed run selects the same prompts and predicts the same values as one never
interrupted.

Who draws with what (reinforge.values.curriculum_collector sets it per step): in a sync run the
loop's thread draws step s with the value model as `observe` left it after step s-1, from prompt
states of the weights that sample. Under the async schedule a producer thread draws step s while the
learner's thread trains the model on older steps, so the draw must not read the live model: at each
`observe(step=t)` the sampler keeps a version (a frozen copy of the value model, and DUMP's
learnability windows), and the producer draws step s with the version of the weights it samples with,
t = s-1-L (reinforge.trainer.rollout_schedule: the oldest allowed, fixed by the config), featurized by
those weights. Which model picked which prompts is then fixed by the config, not by thread timing, and
the draw stands to the outcomes as in a sync run: one version behind the weights it predicts for.

Every group drawn is observed once, whenever its outcome arrives: in the step that trains it, a
step later for a partial rollout carried over, in the step that dropped it for dynamic sampling (the
loop passes those groups too: a model that never saw an all-equal group would learn that no prompt is
easy or hopeless). A partial group's outcome is not filtered by policy version (as the value heads'
`newest_samples` filter is): the value model's input is the prompt's states at draw time, not the
sampling policy's states, so an outcome is still a correct (prompt, result) pair for a policy at most
trainer.max_staleness versions old, and dropping the carried-over groups would drop the long responses
first and bias the predicted pass rates (the reason partial rollouts keep them for the loss too).
"""

from __future__ import annotations

import threading
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

# (tasks[, the model whose states they are]) -> [K, d] prompt representations
Featurize = Callable[..., torch.Tensor]
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
        # Predictions made when a task was drawn, until its group's outcome comes back: oldest first per
        # task (a task drawn again while a group of it is in flight, a partial rollout's, queues behind it).
        self.pending: dict[str, list[tuple[torch.Tensor, torch.Tensor, float]]] = {}
        self.lock = threading.Lock()  # `pending` and `versions`: the async producer adds, the learner's thread takes
        self.reliability = torch.zeros(RELIABILITY_BINS, 3, dtype=torch.float64)
        self.draw_metrics: dict[str, float] = {}
        # Versioned draws (the async schedule): step t -> what observe(step=t) left, frozen (module docstring).
        self.versioned = False
        self.versions: dict[int, dict] = {}
        self.draw_index: int | None = None  # the version the next draws use (the sampling weights' step)
        self.draw_model = None  # the model that featurizes them (the producer's engine copy); None: the featurizer's own

    # ------------------------------------------------------------------ versions

    def _version_now(self) -> dict:
        return {
            "value": self.value.snapshot() if self.value is not None else None,
            "windows": self.bandit.windows_copy() if self.bandit is not None else None,
        }

    def start_versions(self, index: int) -> None:
        """Draw by versions from now on; the current state is version `index` (the weights the run starts from)."""
        self.versioned = True
        with self.lock:
            self.versions.setdefault(index, self._version_now())

    def _draw_version(self) -> dict | None:
        """The version the next draw uses (the newest at or before draw_index: a resumed run with more steps
        samples its first batches with newer weights than the index, and the newest version serves)."""
        if not self.versioned:
            return None
        with self.lock:
            index = self.draw_index
            at_or_before = [i for i in self.versions if index is None or i <= index]
            key = max(at_or_before) if at_or_before else min(self.versions)
            for old in [i for i in self.versions if i < key]:  # the producer draws in step order: never needed again
                del self.versions[old]
            return self.versions[key]

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

    def next_batch(self, size: int) -> list[Task]:
        if size == 0:  # (partial rollouts top up an in-flight pool that may already be full)
            return []
        version = self._draw_version()
        pool = self._draw(size, version)
        if self.value is None:
            return pool
        value = version["value"] if version is not None else self.value
        start = time.perf_counter()
        embeddings = self.featurize(pool) if self.draw_model is None else self.featurize(pool, self.draw_model)
        feature_seconds = time.perf_counter() - start
        predicted, summaries = value.predict(embeddings)
        chosen = nearest_to_target(predicted, size, self.cfg.target) if self.cfg.curriculum == "pcl" else list(range(size))
        with self.lock:
            for i in chosen:
                self.pending.setdefault(pool[i].id, []).append((embeddings[i], summaries[i], predicted[i].item()))
        self.draw_metrics = {**self.draw_metrics,
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
        with self.lock:
            missing = sorted({t.task_id for t in trajectories} - set(self.pending))
            if missing:
                raise ValueError(f"no prediction was made before sampling task(s) {missing[:3]}")
            # The oldest prediction of each task: the group this step trains (groups train in the order drawn).
            values = torch.tensor([self.pending[t.task_id][0][2] for t in trajectories], dtype=torch.float64)
        tau2 = self.value.prior_variance(self.cfg.prior_var_floor)
        return {"prompt_values": values, "prompt_value_var": torch.full_like(values, tau2), "prior_test_z": self.cfg.prior_test_z}

    def observe(self, trajectories: list[Trajectory], advantages: dict[int, float] | None = None, step: int | None = None) -> dict[str, float]:
        """Learn from the outcomes of the groups in `trajectories` (those the step trains, those dynamic
        sampling dropped, partial groups drawn steps ago); `advantages`: mean |advantage| per group id
        (DUMP). With `step`, under versioned draws, what it leaves becomes version `step`."""
        by_group: dict[int, list[Trajectory]] = defaultdict(list)
        for t in trajectories:
            by_group[t.group_id].append(t)
        entries = self._take_predictions(by_group) if self.value is not None else {}
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
        if self.value is not None and groups:
            metrics.update(self._learn(groups, entries))
        if self.versioned and step is not None:
            version = self._version_now()
            with self.lock:
                self.versions[step] = version
        return metrics

    def _take_predictions(self, groups: dict[int, list[Trajectory]]) -> dict[int, tuple[torch.Tensor, torch.Tensor, float]]:
        """Each group's prediction from before sampling, taken off `pending` (in group order: the order drawn)."""
        with self.lock:
            missing = sorted({m[0].task_id for m in groups.values()} - set(self.pending))
            if missing:  # every group the loop trains on was drawn through next_batch, which predicted it
                raise ValueError(f"no prediction was made before sampling task(s) {missing[:3]}: were they drawn from another sampler?")
            taken = {}
            for group_id in sorted(groups):
                task_id = groups[group_id][0].task_id
                queue = self.pending.get(task_id)
                if not queue:
                    raise ValueError(f"task {task_id} has more groups to learn from than predictions made before sampling it")
                taken[group_id] = queue.pop(0)
                if not queue:
                    del self.pending[task_id]
            return taken

    def _learn(self, groups: dict[int, list[Trajectory]], predictions: dict) -> dict[str, float]:
        component = self.cfg.component
        outcomes = [[success(t, component) for t in members] for members in groups.values()]
        entries = [predictions[group_id] for group_id in groups]
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
            "value/groups_observed": float(len(groups)),
        }
        self.value.observe(torch.stack([e[0] for e in entries]), torch.stack([e[1] for e in entries]), predictions, rates, sizes)
        start = time.perf_counter()
        metrics["value/loss"] = self.value.fit()
        metrics["value/train_seconds"] = time.perf_counter() - start
        for k, (p, y, n) in enumerate(reliability_curve_by_bin(self.reliability)):
            if n:
                metrics[f"value/reliability/pred_{k}"], metrics[f"value/reliability/obs_{k}"] = p, y
                metrics[f"value/reliability/n_{k}"] = float(n)
        return metrics

    # ------------------------------------------------------------------ checkpoint

    def state_dict(self) -> dict:
        return {
            "base": self.base.state_dict(),
            "value": self.value.state_dict() if self.value is not None else None,
            "bandit": self.bandit.state_dict() if self.bandit is not None else None,
            "by_distribution": {k: s.state_dict() for k, s in self.by_distribution.items()},
            "pending": {task_id: list(queue) for task_id, queue in self.pending.items()},
            "reliability": self.reliability.clone(),
            "draw_metrics": dict(self.draw_metrics),
            "versions": {
                index: {"value": v["value"].snapshot_state() if v["value"] is not None else None, "windows": v["windows"]}
                for index, v in self.versions.items()
            },
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
        # (a checkpoint from before versioned draws held one prediction per task)
        self.pending = {k: list(v) if isinstance(v, list) else [v] for k, v in state["pending"].items()}
        self.reliability = state["reliability"].clone()
        self.draw_metrics = dict(state["draw_metrics"])
        self.versions = {
            index: {"value": self.value.snapshot_from_state(v["value"]) if v["value"] is not None else None, "windows": v["windows"]}
            for index, v in state.get("versions", {}).items()
        }


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

        def featurize(batch: list[Task], by=model) -> torch.Tensor:  # `by`: the weights that sample (see next_batch)
            return prompt_states(by, env, batch, pad)

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
