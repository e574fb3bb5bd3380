"""Rollout schedules: which weights sample each step's batch, and when, relative to the learner.

The loop asks its schedule for step s's scored batch (`collect(s)`), trains on it, then hands it
the new weights (`publish(s, learner)`). Underneath, one collector builds a batch from an engine
holding some weights: whole groups (`collect_groups`, with DAPO dynamic sampling), or partial
rollouts (`PartialCollector`). Weight versions are counted in publications, one per RL step: the
weights "of step a" are those published after step a's update (0: the weights RL started from).

sync: step s samples with the weights of step s-1, then the learner trains; the engine sits idle
  while the learner updates and the learner while the engine samples.

async (bounded staleness k = `trainer.max_staleness`): a producer thread samples the batches of
  later steps while the learner trains. It samples step s with the weights of step s-1-L exactly
  (step 0 for s <= L+1), with lag L = k, or L = k-1 with partial rollouts (a group resumed once
  more spends the last version of the budget). Always the oldest version allowed, never "the
  newest available": which weights sample which step is then fixed by the config alone, not by
  thread timing, so an async run is as reproducible as a sync one (same seed, same CPU, same
  result), and the producer is never blocked waiting for a version it does not need. The learner
  trains step s with the weights of step s-1, so every token is at most L (+1 when resumed) <= k
  versions old; the loop checks it on every trajectory (`staleness_metrics`). The bound also
  bounds the queue: step s's batch needs the weights of step s-1-L, so at most L+1 batches are
  ever sampled ahead. L = 0 leaves nothing to overlap and is the sync code path itself, so
  async with k = 0 reproduces sync bit for bit.

The weight handoff is versioned: `publish` snapshots the learner's state dict (a copy, taken
between optimizer steps, so the engine never sees half-updated weights) under its step; the
producer samples through a lane of the loop's engine (`Engine.lane()`, reinforge.engines.base),
loading the snapshot it needs into it (`load_weights(state, version)`). Held-out evaluation keeps
using the loop's engine, which `publish` gives the learner's weights (`stage_weights`).

Several policies (a game's seats, reinforge.trainer.policy): the producer holds one lane per
policy, and a step's snapshot is every policy's, taken at the same publication; before sampling
step s it loads each lane with its own policy's weights of step s-1-L, so a joint game samples
every seat with its owner's weights of one and the same step (never one policy's newer weights
against another's older ones), and which weights sample which seat is again fixed by the config.

What a lane is depends on the engine. The in-process TorchEngine's lane is a TorchEngine over the
producer's own copy of the model (one process, two weight sets: two models). Ray rollout workers
(`workers.workers > 0`) and vLLM hold weights outside the trainer, so their lane keeps no model
copy: it ships the snapshot to the workers / the vLLM process (the versioned, checksummed sync) and
samples there, while evaluation goes through the engine itself on the same device, which
serializes its two users and loads the caller's weights when the device holds the other's
(reinforge.engines.weight_sync): the loop evaluates through the engine it was given, evaluation is
rare (`eval.every`), and a second engine for evaluation would sample it with other random streams
than a sync run on the same device. `stage_weights` there only stages the learner's weights:
loading them at once would wait for the producer's batch, and then make the producer load its own
again.

Checkpoints: an async schedule is drained at a checkpoint: it finishes every batch the published
weights allow (up to step s+1+L) and waits; those batches, the partial-rollout pool and the
producer's position go into the checkpoint (`state_dict`), together with the sampler and scorer
state the loop saves, so a resumed run continues exactly where the uninterrupted one would.

Idle time, the quantity async removes, is reported per step: `time/learner_idle` (the learner
waiting for its batch) and `time/engine_idle` (the engine not sampling training rollouts: in sync
the learner's whole step, in async the producer waiting for weights).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Protocol

from reinforge.config import Config
from reinforge.engines.base import Engine, SamplingParams, release_sampling_memory
from reinforge.envs.base import Env
from reinforge.learner.policy_learner import PolicyLearner
from reinforge.models.lora import merged_state_dict
from reinforge.rewards.scorer import RewardScorer
from reinforge.rollout.trajectory import Trajectory
from reinforge.algos.advantages import get_estimator
from reinforge.trainer.collect import Collected, collect_groups, step_seed
from reinforge.trainer.partial_collect import PartialCollector
from reinforge.trainer.policy import each, per_policy
from reinforge.tasks.task_sampler import TaskSampler


class StalenessError(RuntimeError):
    """A trajectory older than trainer.max_staleness reached the learner (a schedule bug)."""


@dataclass
class StepBatch:
    collected: Collected
    metrics: dict[str, float]  # the schedule's own: partial_*, time/learner_idle, time/engine_idle


class Collector(Protocol):
    def collect(self, engine: Engine, step: int, weights_index: int) -> tuple[Collected, dict[str, float]]: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class GroupCollector:
    """Whole groups, each run to completion: today's `collect_groups`, seeded by step."""

    def __init__(self, cfg: Config, env: Env, scorer: RewardScorer, sampler: TaskSampler, params: SamplingParams, max_episode_tokens: int | None):
        self.cfg, self.env, self.scorer, self.sampler = cfg, env, scorer, sampler
        self.params, self.max_episode_tokens = params, max_episode_tokens
        self.decode_hook = None  # set per step by rollout pruning (reinforge.values.value_heads)

    def collect(self, engine: Engine, step: int, weights_index: int) -> tuple[Collected, dict[str, float]]:
        cfg = self.cfg
        collected = collect_groups(
            engine, self.env, self.scorer, self.sampler, cfg.rollout.prompts_per_step,
            cfg.rollout.group_size, self.params, seed=step_seed(cfg.trainer.seed, step),
            dynamic_sampling=cfg.algo.dynamic_sampling, max_rounds=cfg.algo.max_sampling_rounds,
            max_episode_tokens=self.max_episode_tokens, env_workers=cfg.env.workers, decode_hook=self.decode_hook,
            greedy_baseline=get_estimator(cfg.algo.advantage).needs_greedy_baseline,
        )
        return collected, {}

    def state_dict(self) -> dict:
        return {}  # the sampler and the scorer are saved by the loop

    def load_state_dict(self, state: dict) -> None:
        pass


def schedule_lag(cfg: Config) -> int:
    """L: step s samples with the weights of step s-1-L."""
    t = cfg.trainer
    if t.schedule == "sync":
        return 0
    return max(0, t.max_staleness - (1 if t.partial_rollouts else 0))


def staleness_metrics(trajectories: list[Trajectory], learner_version: int, updates_per_step: int, bound: int) -> dict[str, float]:
    """Age of each trajectory's oldest token, in weight versions (RL steps), at the moment it is
    trained; raises if any exceeds `bound`."""
    ages = [(learner_version - t.policy_version) // updates_per_step for t in trajectories]
    if max(ages) > bound:
        worst = max(range(len(ages)), key=ages.__getitem__)
        raise StalenessError(
            f"trajectory of task {trajectories[worst].task_id} (policy version {trajectories[worst].policy_version}) "
            f"is {ages[worst]} versions older than the learner (version {learner_version}); trainer.max_staleness={bound}"
        )
    return {"staleness_max": float(max(ages)), "staleness_mean": sum(ages) / len(ages)}


class SyncSchedule:
    """Sample with the newest weights, then train: the loop's engine is the rollout engine (several
    policies: the mapping name -> engine a game samples its seats with, and `publish` gets the
    mapping name -> learner)."""

    def __init__(self, collector: Collector, engine: Engine, max_staleness: int):
        self.collector, self.engine, self.max_staleness = collector, engine, max_staleness
        self._last_end: float | None = None

    def collect(self, step: int) -> StepBatch:
        start = time.perf_counter()
        engine_idle = start - self._last_end if self._last_end is not None else 0.0
        collected, metrics = self.collector.collect(self.engine, step, step - 1)
        for engine in each(self.engine):  # the update comes next, then `publish` syncs: no sampling in between
            release_sampling_memory(engine)
        self._last_end = time.perf_counter()
        return StepBatch(collected, {**metrics, "time/learner_idle": self._last_end - start, "time/engine_idle": engine_idle})

    def publish(self, step: int, learner: PolicyLearner | dict[str, PolicyLearner]) -> None:
        for engine, own in zip(each(self.engine), each(learner)):
            engine.sync_weights(own.version)

    def state_dict(self) -> dict:
        return {"collector": self.collector.state_dict()}

    def load_state_dict(self, state: dict | None) -> None:
        if state:
            self.collector.load_state_dict(state["collector"])

    def close(self) -> None:
        pass

    def __enter__(self) -> SyncSchedule:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def weights_snapshot(learner: PolicyLearner) -> dict:
    """A copy of the weights engines sample with (a LoRA policy's merged ones), safe from the next optimizer step."""
    return {name: t.detach().clone() for name, t in merged_state_dict(learner.model).items()}


def versioned_snapshots(learner: PolicyLearner | dict[str, PolicyLearner]):
    """(learner version, weights snapshot), or for several policies name -> that, all taken now."""
    return per_policy(learner, lambda own: (own.version, weights_snapshot(own)))


class AsyncSchedule:
    """A producer thread samples step s's batch with the weights of step max(0, s-1-lag).

    `engine` and `learner` are one policy's, or the mappings name -> engine / learner of several
    (as `for_policies` gives them): the producer then holds a lane per policy."""

    def __init__(
        self,
        collector: Collector,
        engine: Engine | dict[str, Engine],
        learner: PolicyLearner | dict[str, PolicyLearner],
        lag: int,
        max_staleness: int,
        first_step: int,
        last_step: int,
    ):
        self.collector, self.eval_engine, self.lag, self.max_staleness = collector, engine, lag, max_staleness
        self.last_step = last_step
        # The producer's: only snapshots reach it (see the module docstring); one lane per policy.
        self.engine = per_policy(engine, lambda own: own.lane())
        self._load(versioned_snapshots(learner))
        self.loaded_index = first_step - 1  # the weights the producer's lanes hold now
        self.published = first_step - 1  # newest publication
        self.weights: dict[int, object] = {}  # step -> its versioned_snapshots (every policy's, taken together)
        self.ready: dict[int, tuple[Collected, dict[str, float]]] = {}
        self.next_step = first_step  # the next batch the producer samples
        self.cond = threading.Condition()
        self.error: BaseException | None = None
        self.closing = False
        self.engine_idle = 0.0  # producer seconds spent waiting, not yet reported
        self.thread: threading.Thread | None = None

    def weights_index(self, step: int) -> int:
        return max(0, step - 1 - self.lag)

    def _load(self, snapshots) -> None:
        """Each lane takes its own policy's snapshot (`versioned_snapshots`' shape)."""
        for lane, (version, state) in zip(each(self.engine), each(snapshots)):
            lane.load_weights(state, version)

    # ------------------------------------------------------------------ producer thread

    def _produce(self) -> None:
        try:
            while True:
                with self.cond:
                    step = self.next_step
                    if step > self.last_step or self.closing:
                        return
                    index = self.weights_index(step)
                    waited = time.perf_counter()
                    # (index < loaded_index only after a resume with more trainer.steps: newer weights serve)
                    while index > self.loaded_index and index not in self.weights and not self.closing:
                        self.cond.wait()
                    self.engine_idle += time.perf_counter() - waited
                    if self.closing:
                        return
                    snapshot = self.weights.pop(index, None) if index > self.loaded_index else None
                    for old in [i for i in self.weights if i < index]:
                        del self.weights[old]
                if snapshot is not None:
                    self._load(snapshot)
                    self.loaded_index = index
                collected, metrics = self.collector.collect(self.engine, step, index)
                with self.cond:
                    self.ready[step] = (collected, metrics)
                    self.next_step = step + 1
                    self.cond.notify_all()
        except BaseException as err:  # handed to the learner's thread, which raises it
            with self.cond:
                self.error = err
                self.cond.notify_all()

    def _start(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._produce, name="reinforge-rollout-producer", daemon=True)
            self.thread.start()

    def _wait(self, done) -> None:
        """Wait (holding self.cond) until done(); the producer's error, or its death, is raised here."""
        while not done():
            if self.error is not None:
                raise self.error
            if self.thread is None or not self.thread.is_alive():
                raise RuntimeError("the rollout producer thread ended without producing the batch the learner needs")
            self.cond.wait(timeout=1.0)

    # ------------------------------------------------------------------ learner thread

    def collect(self, step: int) -> StepBatch:
        self._start()
        start = time.perf_counter()
        with self.cond:
            self._wait(lambda: step in self.ready)
            collected, metrics = self.ready.pop(step)
            engine_idle, self.engine_idle = self.engine_idle, 0.0
        learner_idle = time.perf_counter() - start
        return StepBatch(collected, {**metrics, "time/learner_idle": learner_idle, "time/engine_idle": engine_idle})

    def publish(self, step: int, learner: PolicyLearner | dict[str, PolicyLearner]) -> None:
        for engine, own in zip(each(self.eval_engine), each(learner)):
            engine.stage_weights(own.version)  # loaded when evaluation samples (at once in-process)
        with self.cond:
            self.published = step
            if step + 1 + self.lag <= self.last_step:  # the batch that samples with these weights
                self.weights[step] = versioned_snapshots(learner)
            self.cond.notify_all()

    def state_dict(self) -> dict:
        """Drain, then the producer's state: it finishes every batch the published weights allow
        and stops, so what it holds is fixed by the step alone."""
        self._start()
        target = min(self.last_step, self.published + 1 + self.lag)
        with self.cond:
            self._wait(lambda: self.next_step > target)
            return {"ready": dict(self.ready), "next_step": self.next_step, "collector": self.collector.state_dict()}

    def load_state_dict(self, state: dict | None) -> None:
        if not state:
            return
        self.collector.load_state_dict(state["collector"])
        if "next_step" in state:  # (a sync schedule's checkpoint has nothing in flight)
            self.ready, self.next_step = dict(state["ready"]), state["next_step"]

    def close(self) -> None:
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        if self.thread is not None:
            self.thread.join()

    def __enter__(self) -> AsyncSchedule:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def make_schedule(
    cfg: Config,
    engine: Engine | dict[str, Engine],
    env: Env,
    learner: PolicyLearner | dict[str, PolicyLearner],
    scorer: RewardScorer,
    sampler: TaskSampler,
    params: SamplingParams,
    max_episode_tokens: int | None,
    first_step: int,
) -> SyncSchedule | AsyncSchedule:
    t = cfg.trainer
    collector: Collector
    if t.partial_rollouts:
        collector = PartialCollector(
            env, scorer, sampler, cfg.rollout.prompts_per_step, cfg.rollout.group_size, params,
            t.overprovision, t.max_staleness, t.seed, max_episode_tokens, cfg.env.workers,
            cfg.algo.dynamic_sampling, cfg.algo.max_sampling_rounds,
        )
    else:
        collector = GroupCollector(cfg, env, scorer, sampler, params, max_episode_tokens)
    bound = t.max_staleness if (t.schedule == "async" or t.partial_rollouts) else 0
    lag = schedule_lag(cfg)
    if lag == 0:
        return SyncSchedule(collector, engine, bound)
    return AsyncSchedule(collector, engine, learner, lag, bound, first_step, t.steps)
