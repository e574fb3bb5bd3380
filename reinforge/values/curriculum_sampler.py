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

# (tasks[, the model whose states they are]) -> [K, d] prompt representations
Featurize = Callable[..., torch.Tensor]
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
        # (embedding, summary, predicted pass rate, policy), oldest first per seat (a task drawn again
        # while a group of it is in flight, a partial rollout's, queues behind it).
        self.pending: dict[str, list[tuple[torch.Tensor, torch.Tensor, float, str]]] = {}
        self.lock = threading.Lock()  # `pending` and `versions`: the async producer adds, the learner's thread takes
        self.reliabilities = {name: torch.zeros(RELIABILITY_BINS, 3, dtype=torch.float64) for name in self.values}
        self.draw_metrics: dict[str, float] = {}
        # Versioned draws (the async schedule): step t -> what observe(step=t) left, frozen (module docstring).
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

    def _version_now(self) -> dict:
        return {
            "value": {name: model.snapshot() for name, model in self.values.items()} if self.values else None,
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

    def _predict(self, seats: list[ItemSeat], values: dict[str, PromptValueModel] | None = None) -> tuple[list, torch.Tensor, list]:
        """Each seat's embedding, prediction and summary, by its policy's featurizer and value model
        (`values`: the live models, or a version's; `draw_model`: the weights that sample, one policy's)."""
        embeddings: list = [None] * len(seats)
        predicted = torch.zeros(len(seats), dtype=torch.float64)
        summaries: list = [None] * len(seats)
        for name, model in (values or self.values).items():
            rows = [i for i, s in enumerate(seats) if s.policy == name]
            if not rows:
                continue
            views = [seats[i].view for i in rows]
            featurize = self.featurizers[name]
            by = self.draw_model.get(name) if isinstance(self.draw_model, Mapping) else self.draw_model
            features = featurize(views) if by is None else featurize(views, by)
            p, summary = model.predict(features)
            for k, i in enumerate(rows):
                embeddings[i], summaries[i] = features[k], summary[k]
            predicted[rows] = p.double()
        return embeddings, predicted, summaries

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
        gaps = (predicted - self.cfg.target).abs()
        distance = torch.zeros(len(pool), dtype=torch.float64).index_add_(0, owner, gaps)
        distance = distance / torch.bincount(owner, minlength=len(pool)).double()
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
        keys = [seat_key(t.task_id, t.agent) for t in trajectories]
        with self.lock:
            missing = sorted({t.task_id for t, key in zip(trajectories, keys) if key not in self.pending})
            if missing:
                raise ValueError(f"no prediction was made before sampling task(s) {missing[:3]}")
            # The oldest prediction of each seat: the group this step trains (groups train in the order drawn).
            oldest = [self.pending[key][0] for key in keys]
        tau2 = {name: model.prior_variance(self.cfg.prior_var_floor) for name, model in self.values.items()}
        values = torch.tensor([entry[2] for entry in oldest], dtype=torch.float64)
        variances = torch.tensor([tau2[entry[3]] for entry in oldest], dtype=torch.float64)
        return {"prompt_values": values, "prompt_value_var": variances, "prior_test_z": self.cfg.prior_test_z}

    def observe(self, trajectories: list[Trajectory], advantages: dict[int, float] | None = None, step: int | None = None) -> dict[str, float]:
        """Learn from the outcomes of the groups in `trajectories` (those the step trains, those dynamic
        sampling dropped, partial groups drawn steps ago; every seat of every game of them, once: call
        it once per step); `advantages`: mean |advantage| per group id (DUMP). With `step`, under
        versioned draws, what it leaves becomes version `step`."""
        by_group: dict[int, list[Trajectory]] = defaultdict(list)
        for t in trajectories:
            by_group[t.group_id].append(t)
        entries = self._take_predictions(trajectories) if self.values else {}
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
            metrics.update(self._learn(seat_outcomes(trajectories, self.cfg.component), entries))
        if self.versioned and step is not None:
            version = self._version_now()
            with self.lock:
                self.versions[step] = version
        return metrics

    def _take_predictions(self, trajectories: list[Trajectory]) -> dict[tuple[int, str], tuple]:
        """Each (group, seat)'s prediction from before sampling, taken off `pending` (in group order: the
        order drawn; a game's seats in seat order)."""
        units = list(dict.fromkeys((t.group_id, seat_key(t.task_id, t.agent)) for t in trajectories))
        with self.lock:
            missing = sorted({key for _, key in units} - set(self.pending))
            if missing:  # every group the loop trains on was drawn through next_batch, which predicted it
                raise ValueError(f"no prediction was made before sampling task(s) {missing[:3]}: were they drawn from another sampler?")
            taken = {}
            for unit in sorted(units, key=lambda u: u[0]):  # stable: a group's seats keep their order
                queue = self.pending.get(unit[1])
                if not queue:
                    raise ValueError(f"task {unit[1]} has more groups to learn from than predictions made before sampling it")
                taken[unit] = queue.pop(0)
                if not queue:
                    del self.pending[unit[1]]
            return taken

    def _learn(self, outcomes: dict[tuple[int, str], list[float]], predictions: dict) -> dict[str, float]:
        metrics: dict[str, float] = {}
        for name, model in self.values.items():
            mine = [(predictions[unit], seat) for unit, seat in outcomes.items() if predictions[unit][3] == name]
            if mine:
                metrics.update({self.prefixes[name] + k: v for k, v in self._learn_policy(name, model, mine).items()})
        return metrics

    def _learn_policy(self, name: str, model: PromptValueModel, units: list[tuple[tuple, list[float]]]) -> dict[str, float]:
        """One policy's seats: score the predictions made before sampling, then train on the outcomes."""
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
            "value/groups_observed": float(len(units)),  # (a game: its trained seats, each an outcome)
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
            "pending": {key: list(queue) for key, queue in self.pending.items()},
            "draw_metrics": dict(self.draw_metrics),
            "versions": {
                index: {"value": {n: m.snapshot_state() for n, m in v["value"].items()} if v["value"] is not None else None,
                        "windows": v["windows"]}
                for index, v in self.versions.items()
            },
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
        # (a checkpoint from before versioned draws held one prediction per task; before several policies, no policy)
        queues = {k: list(v) if isinstance(v, list) else [v] for k, v in state["pending"].items()}
        self.pending = {k: [e if len(e) == 4 else (*e, names[0]) for e in q] for k, q in queues.items()}
        self.draw_metrics = dict(state["draw_metrics"])

        def snapshots(saved_value) -> dict[str, PromptValueModel]:
            per_name = {names[0]: saved_value} if "net" in saved_value else saved_value  # (one model's, before several policies)
            return {n: self.values[n].snapshot_from_state(v) for n, v in per_name.items()}

        self.versions = {
            index: {"value": snapshots(v["value"]) if v["value"] is not None else None, "windows": v["windows"]}
            for index, v in state.get("versions", {}).items()
        }


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
            def featurize(batch: list[Task], by=model) -> torch.Tensor:  # `by`: the weights that sample (see next_batch)
                return prompt_states(by, env, batch, pad)

            return featurize

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
