"""The Env protocol: how the world answers the policy, one episode at a time, in tokens.

An environment object (what the trainer holds) knows the tokenizer and makes episodes; an
episode is reset with a task (giving the prompt's token ids) and stepped with each policy turn
(giving the observation's token ids to append, a per-turn reward if any, and whether it ended).
The rollout loop in `reinforge.rollout.episodes` drives many episodes together, one batched
engine call per policy turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # a type only: a reward worker process that imports this skips transformers (~1 CPU-s each)
    from transformers import PreTrainedTokenizerBase

from reinforge.tasks.task import Task

# The key under which an env reports its own reward in StepResult.info (the adapters do); the
# rollout loop sums it into trajectory.stats, where the `env_reward` reward component reads it
# (reinforge.rewards.env_reward). Declared with the protocol, so envs need not import rewards.
ENV_REWARD = "env_reward"


@dataclass
class StepResult:
    """The env's answer to one policy turn.

    `observation_ids` are appended after the turn's sampled tokens (tokenized once, never
    trained on); `info` carries counts the trainer aggregates (tool calls, valid calls, tool
    errors, void turns) under numeric values, plus `finish_reason` when the env ends the episode.
    """

    observation_ids: list[int] = field(default_factory=list)
    reward: float | None = None
    done: bool = False
    info: dict = field(default_factory=dict)
    observation_text: str = ""  # for transcripts and the run report only
    observation_role: str = "env"  # who answered, as the report labels it: env, tool


class Episode(Protocol):
    def reset(self, task: Task) -> list[int]:
        """The prompt's token ids."""
        ...

    def step(self, turn_text: str, finish_reason: str) -> StepResult:
        """React to the policy's turn (its decoded text; `finish_reason` is the engine's: stop or
        length)."""
        ...


class Env(Protocol):
    tokenizer: PreTrainedTokenizerBase
    stop_token_ids: tuple[int, ...]
    max_turns: int

    def episode(self) -> Episode:
        """A fresh episode (its own state: turn count, message history, tool sandbox...)."""
        ...

    def prompt_ids(self, task: Task) -> list[int]:
        ...

    def sft_example(self, task: Task) -> tuple[list[int], list[bool]]:
        """A task's demonstration in tokens, and which of them are trained (the policy's turns)."""
        ...

    def decode_response(self, token_ids: list[int]) -> str:
        ...

    # Optional: `demonstration_turns(task) -> list[str]`, the text of each assistant turn the
    # warm-up teaches, for the budget checks before any model is built; without it they are read
    # from sft_example's trained spans.
    #
    # Optional: `run_groups(engine, tasks, group_size, params, seed, first_group_id,
    # max_episode_tokens) -> list[Trajectory]`: an env that runs whole rollouts itself (the gateway
    # env, whose episodes are agent programs calling the engine over HTTP) gets them from
    # `rollout.episodes.rollout_groups` instead of being stepped turn by turn. It returns the
    # episodes in task order, `group_size` per task, each episode's pieces together with its lead
    # piece first (`Trajectory.episode_part`, rollout.episode_parts). Such an env may also have
    # `close()`, which the pipeline calls when the run ends (its server, its processes).
    #
    # Optional: `partial_rounds(max_episode_tokens, env_workers) -> PartialRounds`: how the env's
    # episodes pause and resume under trainer.partial_rollouts when the rollout loop does not
    # drive them turn by turn (reinforge.rollout.partial.PartialRounds; the game env's is
    # reinforge.games.partial_play.GameRounds). Without it an env with `run_groups` is refused.
    #
    # Optional: `after_step(step, engine) -> dict[str, float]`, called by the RL loop after each
    # update (the engine holds the new weights), its metrics logged with the step; and
    # `state_dict()` / `load_state_dict(state)`, the env's own state across steps, saved in every
    # checkpoint and restored on resume (the game env's opponent pool, reinforge.games.pool).
