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
from reinforge.trainer.collect import Collected, round_seed, step_seed
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
        self.pool: list[PartialGroup] = []  # groups carried over, oldest first
        self.next_key = 0
        self.decode_hook = None  # set per step by rollout pruning (reinforge.values.value_heads): checks between chunks

    def collect(self, engine: Engine, step: int, weights_index: int) -> tuple[Collected, dict[str, float]]:
        """Step `step`'s scored groups; `engine` holds the weights published after step
        `weights_index` (0: the initial weights), and the batch is trained by those of step-1."""
        fresh = self.sampler.next_batch(max(0, self.in_flight - len(self.pool)))
        for task in fresh:
            self.pool.append(self.rounds.start_group(task, self.next_key, self.group_size, engine))
            self.next_key += 1
        # A group started after step a must be trained by step a+1+k: if that is this step, finish it now.
        must_finish = [g.start_index is not None and step - g.start_index > self.max_staleness for g in self.pool]
        t0 = time.perf_counter()
        seed = round_seed(step_seed(self.seed, step), 0)  # the seed `collect_groups` gives its first round
        stats = self.rounds.sample(engine, self.pool, self.params, seed, weights_index, self.prompts, must_finish, self.decode_hook)
        t1 = time.perf_counter()

        complete = sorted((g for g in self.pool if g.complete), key=lambda g: (g.start_index, g.key))
        chosen = complete[: self.prompts]
        chosen_keys = {g.key for g in chosen}
        self.pool = [g for g in self.pool if g.key not in chosen_keys]
        late = [g.task.id for g in self.pool if step - g.start_index > self.max_staleness]
        if late:  # cannot happen with overprovision <= 2 (preflight); a bug if it does
            raise RuntimeError(f"partial rollouts: groups {late} would exceed trainer.max_staleness={self.max_staleness}")

        trajectories = [t for i, group in enumerate(chosen) for t in self.rounds.trajectories(group, i)]
        pruned = [t for t in trajectories if t.finish_reason == "pruned"]  # rollout pruning: not scored, not trained
        trajectories = [t for t in trajectories if t.finish_reason != "pruned"]
        tasks = {g.task.id: g.task for g in chosen}
        reward_metrics = self.scorer.score(tasks, trajectories)
        t2 = time.perf_counter()
        metrics = {**reward_metrics, "sampling_rounds": 1.0, "train_groups": float(len(chosen))}
        collected = Collected(trajectories, tasks, metrics, 1, t1 - t0, t2 - t1, pruned)
        partial_metrics = {
            "partial_resumed": float(sum(e.rounds > 1 for g in chosen for e in g.episodes)),
            "partial_aborted": float(stats.aborted),
            "partial_carried_groups": float(len(self.pool)),
        }
        return collected, partial_metrics

    def state_dict(self) -> dict:
        return {"pool": self.pool, "next_key": self.next_key}

    def load_state_dict(self, state: dict) -> None:
        self.pool, self.next_key = list(state["pool"]), state["next_key"]
        for group in self.pool:  # e.g. a multi-turn episode's env state is rebuilt from its turns (partial_turns)
            self.rounds.restore(group)
