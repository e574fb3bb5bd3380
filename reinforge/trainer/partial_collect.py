"""A step's groups from partial rollouts (APRIL): over-provision, stop early, carry the rest over.

Each step keeps `ceil(overprovision x prompts_per_step)` groups in flight: the groups carried over
from earlier steps, topped up with fresh tasks. One engine call advances all of them and stops as
soon as `prompts_per_step` groups are complete (`reinforge.rollout.partial.sample_round`); the
step trains on the oldest complete groups and carries every other group over, finished rows and
all, to be resumed with the next weights. With Ray rollout workers the engine call splits the
round over the workers by whole groups, each worker stopping once its share of the complete groups
it owes (and its must-finish groups) are done (`reinforge.rollout.partial.GroupQuota.split`).

Staleness stays bounded by k = `trainer.max_staleness` (in weight versions, i.e. RL steps): a
group whose first tokens came from weights published after step a is trained at step s by the
learner holding the weights of step s-1, so it must be trained by step a+1+k. A group that could
not wait one more step is marked must-finish, and the round does not stop before it is complete;
the oldest complete groups go first, so it is always trained. Nothing is thrown away, so long
responses are not filtered out (which would bias the data towards short ones). With
overprovision <= 2 the must-finish groups never outnumber the groups a step trains on.

With dynamic sampling (algo.dynamic_sampling, DAPO) the complete groups a round yields are scored
and those whose rewards are all equal dropped (`Collected.dropped`: the prompt-value model still
learns from them); further rounds, topped up with fresh tasks, run until the step has
`prompts_per_step` informative groups or `algo.max_sampling_rounds` rounds, as in
`reinforge.trainer.collect.collect_groups`. A must-finish group leaves in the first round either way
(trained or dropped), so the staleness bound holds.

Multi-turn episodes (the tool env, text games: any env the rollout loop drives turn by turn) take
the same path with a round of several engine calls, the env stepped between them; an episode
carried over keeps its env state and transcript and resumes mid-turn or at its next turn
(`reinforge.rollout.partial_turns`). An env may bring its own kind of round (`partial_rounds`):
games pause between moves or mid-turn, each seat sampled by its player's engine
(`reinforge.games.partial_play`). The gateway, whose agent programs run whole episodes
themselves, is refused: its episodes cannot be paused from here.
"""

from __future__ import annotations

import math
import time

from reinforge.engines.base import Engine, SamplingParams
from reinforge.envs.base import Env
from reinforge.rewards.scorer import RewardScorer
from reinforge.rollout.partial import PartialGroup, PartialRounds, SingleTurnRounds
from reinforge.rollout.partial_turns import MultiTurnRounds
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task
from reinforge.trainer.collect import Collected, count_groups, keep_informative, round_seed, step_seed
from reinforge.tasks.task_sampler import TaskSampler


class PartialCollector:
    def __init__(
        self,
        env: Env,
        scorer: RewardScorer,
        sampler: TaskSampler,
        prompts: int,
        group_size: int,
        params: SamplingParams,
        overprovision: float,
        max_staleness: int,
        seed: int,
        max_episode_tokens: int | None = None,
        env_workers: int = 8,
        dynamic_sampling: bool = False,
        max_rounds: int = 1,
    ):
        if hasattr(env, "partial_rounds"):  # an env with episodes of its own kind (games: reinforge.games.partial_play)
            self.rounds: PartialRounds = env.partial_rounds(max_episode_tokens, env_workers)
        elif getattr(env, "run_groups", None) is not None:  # preflight refuses it by the config; a Python caller gets the reason here
            raise ValueError(
                "trainer.partial_rollouts=true needs an env whose episodes can be paused; "
                f"{type(env).__name__} runs whole rollouts itself (run_groups: the gateway)"
            )
        elif env.max_turns > 1:
            self.rounds = MultiTurnRounds(env, max_episode_tokens, env_workers)
        else:  # single-turn keeps its one-call round (partial.sample_round)
            self.rounds = SingleTurnRounds(env)
        self.env, self.scorer, self.sampler = env, scorer, sampler
        self.prompts, self.group_size, self.params = prompts, group_size, params
        self.in_flight = max(prompts, math.ceil(overprovision * prompts))
        self.max_staleness = max_staleness
        self.seed = seed
        self.dynamic_sampling, self.max_rounds = dynamic_sampling, max_rounds
        self.pool: list[PartialGroup] = []  # groups carried over, oldest first
        self.next_key = 0
        self.decode_hook = None  # set per step by rollout pruning (reinforge.values.value_heads): checks between chunks

    def collect(self, engine: Engine, step: int, weights_index: int) -> tuple[Collected, dict[str, float]]:
        """Step `step`'s scored groups; `engine` holds the weights published after step
        `weights_index` (0: the initial weights), and the batch is trained by those of step-1.
        With dynamic sampling, the complete groups whose rewards are all equal are dropped (in
        `Collected.dropped`) and further rounds, topped up with fresh tasks, run until the step has
        `prompts` informative groups or `max_rounds` rounds (as collect_groups does)."""
        chosen: list[PartialGroup] = []
        kept: list[Trajectory] = []
        dropped: list[Trajectory] = []
        pruned: list[Trajectory] = []
        tasks: dict[str, Task] = {}
        metrics: dict[str, float] = {}
        rollout_s = reward_s = 0.0
        rounds = aborted = taken = 0
        while True:
            fresh = self.sampler.next_batch(max(0, self.in_flight - len(self.pool) - len(chosen)))
            for task in fresh:
                self.pool.append(self.rounds.start_group(task, self.next_key, self.group_size, engine))
                self.next_key += 1
            # A group started after step a must be trained by step a+1+k: if that is this step, finish it now.
            must_finish = [g.start_index is not None and step - g.start_index > self.max_staleness for g in self.pool]
            need = self.prompts - len(chosen)
            t0 = time.perf_counter()
            seed = round_seed(step_seed(self.seed, step), rounds)  # the seeds `collect_groups` gives its rounds
            stats = self.rounds.sample(engine, self.pool, self.params, seed, weights_index, need, must_finish, self.decode_hook)
            t1 = time.perf_counter()
            rounds += 1
            aborted += stats.aborted

            complete = sorted((g for g in self.pool if g.complete), key=lambda g: (g.start_index, g.key))
            taking = complete[:need]
            taking_keys = {g.key for g in taking}
            self.pool = [g for g in self.pool if g.key not in taking_keys]
            late = [g.task.id for g in self.pool if step - g.start_index > self.max_staleness]
            if late:  # cannot happen with overprovision <= 2 (preflight); a bug if it does
                raise RuntimeError(f"partial rollouts: groups {late} would exceed trainer.max_staleness={self.max_staleness}")

            trajectories = [t for i, group in enumerate(taking) for t in self.rounds.trajectories(group, taken + i)]
            taken += len(taking)
            pruned += [t for t in trajectories if t.finish_reason == "pruned"]  # rollout pruning: not scored, not trained
            trajectories = [t for t in trajectories if t.finish_reason != "pruned"]
            tasks.update({g.task.id: g.task for g in taking})
            round_metrics = self.scorer.score(tasks, trajectories)
            t2 = time.perf_counter()
            rollout_s, reward_s = rollout_s + t1 - t0, reward_s + t2 - t1
            if rounds == 1:
                metrics = round_metrics  # the reward curve reports what the policy got, before filtering
            if not self.dynamic_sampling:
                kept, chosen = trajectories, taking
                break
            keep = keep_informative(trajectories, self.scorer)
            keep_ids = {t.group_id for t in keep}
            kept += keep
            dropped += [t for t in trajectories if t.group_id not in keep_ids]
            chosen += [g for i, g in enumerate(taking) if taken - len(taking) + i in keep_ids]
            if len(chosen) >= self.prompts or rounds >= self.max_rounds:
                if not kept:  # no informative group at all: train on the last round's, as collect_groups does
                    kept, chosen = trajectories, taking
                    last = {id(t) for t in trajectories}
                    dropped = [t for t in dropped if id(t) not in last]
                break

        metrics = {**metrics, "sampling_rounds": float(rounds), "train_groups": float(len(chosen))}
        if self.dynamic_sampling:
            metrics["sampled_zero_variance_group_frac"] = (taken - count_groups(kept)) / max(1, taken)
        collected = Collected(kept, tasks, metrics, rounds, rollout_s, reward_s, pruned, dropped)
        partial_metrics = {
            "partial_resumed": float(sum(e.rounds > 1 for g in chosen for e in g.episodes)),
            "partial_aborted": float(aborted),
            "partial_carried_groups": float(len(self.pool)),
        }
        return collected, partial_metrics

    def state_dict(self) -> dict:
        return {"pool": self.pool, "next_key": self.next_key}

    def load_state_dict(self, state: dict) -> None:
        self.pool, self.next_key = list(state["pool"]), state["next_key"]
        for group in self.pool:  # e.g. a multi-turn episode's env state is rebuilt from its turns (partial_turns)
            self.rounds.restore(group)
