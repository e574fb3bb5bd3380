"""The Trajectory type: exactly what was sampled and observed in one episode, and how it scored."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Trajectory:
    """One episode, in tokens.

    `token_ids` is the whole episode (prompt, every policy turn, every env observation) exactly as
    the engine and env produced them; `loss_mask[i]` is true only where token i was sampled by the
    policy, and `behaviour_logprobs[i]` is the engine's log-prob of that token (0 elsewhere).
    `turn_spans` are [start, end) index ranges of the policy's turns; `turn_rewards` (one per
    policy turn) are the env's per-turn rewards when it gives any; `transcript` lists the turns as
    text ({"role", "text"}: "policy" turns and "env" / "tool" observations) for people to read, never for
    training; `stats` holds the episode's counts (tool calls, valid calls, tool errors, void turns).
    `response_text` is the policy's last turn: what the verifier checks.

    `policy_version` is the oldest policy version that sampled any of its tokens (so a staleness
    check on it is conservative). `token_versions`, set by partial rollouts (whose episodes may be
    resumed with newer weights), gives the version that sampled each token (-1 on tokens the
    policy did not sample); None means every sampled token came from `policy_version`.

    `agent` names the player whose turns these are when one episode (a game) yields a trajectory
    per player (reinforge.games); per-agent estimators group by it. None for single-agent envs.
    An episode may come as several trajectories (an agent trained through the gateway whose
    history was not append-only: reinforge.gateway.env): `episode_part` is 0 on the episode's lead
    piece and 1, 2, ... on the pieces that follow it, right after it in the list. Only the lead is
    scored and given an advantage; the other pieces share both (rewards.scorer, trainer.advantage_step).
    `agent_result` is what such an agent returned (picklable), for rewards of the form
    fn(task, result, transcript).
    """

    task_id: str
    group_id: int
    token_ids: list[int]
    loss_mask: list[bool]
    behaviour_logprobs: list[float]
    turn_spans: list[tuple[int, int]]
    prompt_length: int
    response_text: str
    policy_version: int
    finish_reason: str
    rewards: dict[str, float] = field(default_factory=dict)  # named components, unweighted
    reward: float = 0.0  # weighted total, what the advantage estimator sees
    turn_rewards: list[float] | None = None
    errors: list[str] = field(default_factory=list)
    # component -> why its reward call failed (timeout / raised / worker_died / not_a_number), set by the scorer
    reward_failures: dict[str, str] = field(default_factory=dict)
    transcript: list[dict] = field(default_factory=list)
    stats: dict[str, float] = field(default_factory=dict)
    token_versions: list[int] | None = None
    agent: str | None = None  # the player (role) whose turns these are, in a multi-player game
    episode_part: int = 0
    agent_result: Any = None
    baseline_reward: float | None = None  # ReMax: the reward of one greedy rollout of the same task

    @property
    def num_turns(self) -> int:
        return len(self.turn_spans)

    @property
    def num_sampled_tokens(self) -> int:
        return sum(self.loss_mask)


def single_turn_trajectory(
    task_id: str,
    prompt_ids: list[int],
    sampled_ids: list[int],
    logprobs: list[float],
    response_text: str,
    finish_reason: str = "stop",
    group_id: int = 0,
    policy_version: int = 0,
    errors: list[str] | None = None,
) -> Trajectory:
    """A one-turn episode: the prompt, then the policy's sampled tokens (the only trained ones)."""
    if len(logprobs) != len(sampled_ids):
        raise ValueError(f"{len(sampled_ids)} sampled tokens but {len(logprobs)} log-probs")
    start, end = len(prompt_ids), len(prompt_ids) + len(sampled_ids)
    return Trajectory(
        task_id=task_id,
        group_id=group_id,
        token_ids=list(prompt_ids) + list(sampled_ids),
        loss_mask=[False] * start + [True] * len(sampled_ids),
        behaviour_logprobs=[0.0] * start + list(logprobs),
        turn_spans=[(start, end)],
        prompt_length=start,
        response_text=response_text,
        policy_version=policy_version,
        finish_reason=finish_reason,
        errors=list(errors or []),
    )
