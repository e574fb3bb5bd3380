"""The text-game env: the Env the trainer holds when `env.type: text_game` (task.source: text_game).

A single-agent game is a multi-turn env like any other (reinforge.envs.base): the rollout loop
drives its episodes, one batched engine call per turn, keeps the policy's sampled tokens as they
are and appends each answer of the game tokenized once (`ChatFormat.observation_ids`). The game
itself (textgames.game) works in text; `TextGameEpisode` is its referee:

- a legal move is played and answered with the game's feedback; the game's own end (solved, or
  out of guesses / questions / moves) ends the episode with finish reason `stop`;
- an illegal move is counted (`illegal_moves`) and answered "Illegal move: why. Try again."; the
  `max_illegal_moves`-th ends the game as lost (finish reason `illegal_moves`);
- `env.max_turns` attempts (legal or not) cut the game (the rollout loop's finish reason
  `max_turns`), as does the token budget (`max_tokens`).

Rewards: `info["env_reward"]` is reported at every turn, 0 until the game ends and then
`solved_reward` or `failed_reward`, so the episode's sum is its result even when it was cut
(`reward.components: [{name: game, fn: env_reward}]`). Per-turn rewards (`StepResult.reward`:
`turn_reward`, `illegal_move_reward`, `progress_reward` times the game's progress signal) are
reported only when one of them is set; the trainer adds them up or credits them turn by turn
(algo.advantage: turn_rloo). Counters summed into each trajectory's stats: `solved`,
`illegal_moves`, `game_moves` (legal moves).
"""

from __future__ import annotations

import json
import random

from transformers import PreTrainedTokenizerBase

from reinforge.envs.base import StepResult
from reinforge.envs.chat_game_env import ChatGameEnv
from reinforge.tasks.task import Task
from reinforge.textgames.game import Puzzle, TextGame
from reinforge.textgames.registry import build_game
from reinforge.textgames.spec import TextGameSpec


def illegal_message(feedback: str) -> str:
    return f"Illegal move: {feedback} Try again."


class TextGameEnv(ChatGameEnv):
    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_turns: int):
        super().__init__(tokenizer, max_turns)
        self._games: dict[str, TextGame] = {}

    def game(self, spec: TextGameSpec) -> TextGame:
        key = json.dumps([spec.game, spec.options], sort_keys=True)
        if key not in self._games:  # a word list is read once per run, not once per episode
            self._games[key] = build_game(spec.game, spec.options)
        return self._games[key]

    def puzzle(self, task: Task) -> tuple[TextGameSpec, Puzzle]:
        spec = TextGameSpec.model_validate(task.metadata["text_game"])
        return spec, self.game(spec).new_puzzle(random.Random(task.metadata["puzzle_seed"]))

    def episode(self) -> "TextGameEpisode":
        return TextGameEpisode(self)

    def evaluate_games(self, engine, tasks: list[Task], max_new_tokens: int, samples: int, temperature: float,
                       seed: int, max_episode_tokens: int | None = None) -> tuple[dict[str, float], list[dict]]:
        from reinforge.textgames.evaluation import evaluate_text_games

        return evaluate_text_games(self, engine, tasks, max_new_tokens, samples, temperature, seed, max_episode_tokens)


class TextGameEpisode:
    def __init__(self, env: TextGameEnv):
        self.env = env
        self.spec: TextGameSpec | None = None
        self.puzzle: Puzzle | None = None
        self.illegal = 0

    def reset(self, task: Task) -> list[int]:
        self.spec, self.puzzle = self.env.puzzle(task)
        self.illegal = 0
        return self.env.prompt_ids(task)

    def step(self, turn_text: str, finish_reason: str) -> StepResult:
        spec, puzzle = self.spec, self.puzzle
        attempt = puzzle.attempt(turn_text)
        info: dict = {"env_reward": 0.0, "illegal_moves": 0, "game_moves": int(attempt.legal), "solved": 0}
        reward = spec.turn_reward
        if attempt.legal:
            reward += spec.progress_reward * attempt.progress
            reply = attempt.feedback
        else:
            self.illegal += 1
            info["illegal_moves"] = 1
            reward += spec.illegal_move_reward
            reply = illegal_message(attempt.feedback)
        forfeit = self.illegal >= spec.max_illegal_moves
        done = puzzle.over or forfeit
        if done:
            info["solved"] = int(puzzle.solved)
            info["env_reward"] = spec.solved_reward if puzzle.solved else spec.failed_reward
            info["finish_reason"] = "stop" if puzzle.over else "illegal_moves"
        observation = [] if done else self.env.chat.observation_ids([{"role": "user", "content": reply}])
        return StepResult(
            observation_ids=observation,
            reward=reward if spec.per_turn_rewards else None,
            done=done,
            info=info,
            observation_text=reply,
        )
