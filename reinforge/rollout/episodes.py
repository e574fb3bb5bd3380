"""The rollout loop: drive groups of episodes against an Env, one batched engine call per turn.

All episodes of a call advance together: every live episode's token sequence goes to the engine
in one batch, each sampled turn goes to its episode's env (in parallel threads, since tools can
be slow), and the observation tokens the env returns are appended as they are. A single-turn env
ends every episode after the first call, which makes this exactly the single-turn rollout.

Tokens in, tokens out: the trajectory holds the engine's sampled ids (loss mask on, behaviour
log-probs kept) and the env's observation ids (loss mask off), concatenated, never re-tokenized.

Limits end an episode with a clear finish reason and leave it trainable: the env's `max_turns`
("max_turns"), and `max_episode_tokens` over the whole sequence ("max_tokens": the turn that
crosses it is cut to fit, keeping only tokens the policy really sampled).
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from reinforge.engines.base import Engine, Generation, SamplingParams
from reinforge.envs.base import Env, Episode, StepResult
from reinforge.rollout.pruned_sampling import generate_pruned
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task


def add_sampled_turn(stream, generation: Generation, text: str, budget: int | None) -> bool:
    """Append a sampled turn to a token stream (an episode, or one player's seat in a game: any
    object with token_ids, loss_mask, logprobs, turn_spans, transcript, errors, policy_version,
    last_text); False when the `budget` on the whole sequence cut it (only tokens the policy
    really sampled are kept)."""
    ids, logprobs = generation.token_ids, generation.logprobs
    fits = budget is None or len(stream.token_ids) + len(ids) <= budget
    if not fits:
        keep = max(0, budget - len(stream.token_ids))
        ids, logprobs = ids[:keep], logprobs[:keep]
    start = len(stream.token_ids)
    stream.token_ids += ids
    stream.loss_mask += [True] * len(ids)
    stream.logprobs += list(logprobs)
    stream.turn_spans.append((start, len(stream.token_ids)))
    stream.transcript.append({"role": "policy", "text": text})
    stream.errors += generation.errors
    if stream.policy_version is None:
        stream.policy_version = generation.policy_version
    stream.last_text = text
    return fits


@dataclass
class RunningEpisode:
    """One episode in progress."""

    env: Episode
    task: Task
    group_id: int
    token_ids: list[int]
    prompt_length: int
    loss_mask: list[bool] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    turn_rewards: list[float | None] = field(default_factory=list)
    transcript: list[dict] = field(default_factory=list)
    stats: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    policy_version: int | None = None
    last_text: str = ""
    finish_reason: str | None = None

    def __post_init__(self) -> None:
        self.loss_mask = [False] * len(self.token_ids)
        self.logprobs = [0.0] * len(self.token_ids)

    def add_turn(self, generation: Generation, text: str, budget: int | None) -> bool:
        """Append the sampled turn; False when the episode's token budget cut it."""
        return add_sampled_turn(self, generation, text, budget)

    def add_observation(self, result: StepResult) -> None:
        self.token_ids += result.observation_ids
        self.loss_mask += [False] * len(result.observation_ids)
        self.logprobs += [0.0] * len(result.observation_ids)
        if result.observation_text:
            self.transcript.append({"role": result.observation_role, "text": result.observation_text})

    def trajectory(self) -> Trajectory:
        rewards = None
        if any(r is not None for r in self.turn_rewards):
            rewards = [0.0 if r is None else float(r) for r in self.turn_rewards]
        return Trajectory(
            task_id=self.task.id,
            group_id=self.group_id,
            token_ids=self.token_ids,
            loss_mask=self.loss_mask,
            behaviour_logprobs=self.logprobs,
            turn_spans=self.turn_spans,
            prompt_length=self.prompt_length,
            response_text=self.last_text,
            policy_version=self.policy_version or 0,
            finish_reason=self.finish_reason or "stop",
            turn_rewards=rewards,
            errors=self.errors,
            transcript=self.transcript if len(self.turn_spans) > 1 or len(self.transcript) > 1 else [],
            stats=dict(self.stats),
        )


def end_turn(episode: RunningEpisode, result: StepResult, fit: bool, turn: int, max_turns: int, max_episode_tokens: int | None) -> bool:
    """Record the env's answer to the episode's turn `turn` (0-based); True when the episode goes on
    (the observation appended), else its finish reason is set. `fit`: the turn was not cut by
    `max_episode_tokens`."""
    episode.turn_rewards.append(result.reward)
    episode.stats.update({k: v for k, v in result.info.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
    if "error" in result.info:
        episode.errors.append(str(result.info["error"]))
    if not fit:
        episode.finish_reason = "max_tokens"
    elif result.done:
        episode.finish_reason = result.info.get("finish_reason", "stop")
    elif turn + 1 == max_turns:
        episode.finish_reason = "max_turns"
    elif max_episode_tokens is not None and len(episode.token_ids) + len(result.observation_ids) >= max_episode_tokens:
        episode.finish_reason = "max_tokens"  # no room left for the observation and a reply
    else:
        episode.add_observation(result)
        return True
    return False


def env_step(episode: RunningEpisode, generation: Generation, text: str) -> StepResult:
    if generation.finish_reason == "pruned":  # rollout pruning stopped it: the episode ends here, unscored
        return StepResult(done=True, info={"finish_reason": "pruned"})
    try:
        return episode.env.step(text, generation.finish_reason)
    except Exception as err:  # an env bug ends this episode, recorded; the batch goes on
        return StepResult(done=True, info={"finish_reason": "error", "error": f"env step: {type(err).__name__}: {err}"})


def turn_seed(seed: int | None, turn: int) -> int | None:
    """Turn 0 samples with the caller's seed (so a single-turn rollout is unchanged); later turns
    with seeds derived from it."""
    if seed is None or turn == 0:
        return seed
    return seed * 1_000_033 + turn


def rollout_groups(
    engine: Engine,
    env: Env,
    tasks: list[Task],
    group_size: int,
    params: SamplingParams,
    seed: int | None,
    first_group_id: int = 0,
    max_episode_tokens: int | None = None,
    env_workers: int = 8,
    decode_hook=None,
) -> list[Trajectory]:
    """`group_size` episodes per task; group ids are consecutive from `first_group_id`, and the
    trajectories come back in task order, `group_size` at a time. An env that runs whole rollouts
    itself (`run_groups`: the gateway env, whose episodes are agent programs; reinforge.games, whose
    episodes have several players) is handed them; its episodes may come as several trajectories
    each (rollout.episode_parts, or one per player). `decode_hook` (rollout pruning,
    reinforge.values.rollout_pruning.PruningHook) goes to the engine's generate in a single-turn
    call on an engine with a decode hook (reinforge.engines.decode_hook); otherwise each turn is
    sampled in chunks checked by it (reinforge.rollout.pruned_sampling), and a multi-turn episode
    whose turn it stops ends there ("pruned", the env not stepped): the head reads the prefix of
    the turn being sampled, after the whole episode so far. An env that runs whole rollouts gets it as
    `run_groups(..., decode_hook=)` (a PruningHook, or one per policy) and places its rows itself."""
    run_groups = getattr(env, "run_groups", None)
    if run_groups is not None:
        hook = {} if decode_hook is None else {"decode_hook": decode_hook}
        return run_groups(engine, tasks, group_size, params, seed, first_group_id, max_episode_tokens, **hook)
    episodes = []
    for index, task in enumerate(tasks):
        for _ in range(group_size):
            episode_env = env.episode()
            prompt = episode_env.reset(task)
            episodes.append(RunningEpisode(episode_env, task, first_group_id + index, list(prompt), len(prompt)))

    live = list(episodes)
    # The engine's own decode hook serves a single-turn call on an engine that has one; otherwise
    # the hook's checks run between chunks of sampling (reinforge.rollout.pruned_sampling).
    in_decode_loop = env.max_turns == 1 and getattr(engine, "supports_decode_hook", False)
    member = {id(e): (e.group_id, i % group_size) for i, e in enumerate(episodes)}
    with ThreadPoolExecutor(max_workers=env_workers) as pool:
        for turn in range(env.max_turns):
            prompts = [list(e.token_ids) for e in live]
            if decode_hook is None or in_decode_loop:
                hook = {} if decode_hook is None else {"decode_hook": decode_hook}
                generations = engine.generate(prompts, params, seed=turn_seed(seed, turn), **hook)
            else:
                settled: dict = {}
                for e in episodes:
                    if e.finish_reason is not None and e.finish_reason != "pruned":
                        settled.setdefault(e.group_id, []).append(member[id(e)])
                generations = generate_pruned(
                    engine, prompts, params, turn_seed(seed, turn), decode_hook, [member[id(e)] for e in live], settled
                )
            texts = [env.decode_response(g.token_ids) for g in generations]
            fits = [e.add_turn(g, text, max_episode_tokens) for e, g, text in zip(live, generations, texts)]
            if env.max_turns == 1:
                results = [env_step(e, g, t) for e, g, t in zip(live, generations, texts)]
            else:
                results = list(pool.map(env_step, live, generations, texts))
            live = [e for e, result, fit in zip(live, results, fits) if end_turn(e, result, fit, turn, env.max_turns, max_episode_tokens)]
            if not live:
                break
    return [e.trajectory() for e in episodes]
