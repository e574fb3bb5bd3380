"""What the game envs (reinforge.games.env, reinforge.textgames.env) share: a referee that talks to
the policy in chat messages, with warm-up games stored as the task's chat demonstration.

The subclass sets nothing but calls `super().__init__(tokenizer, max_turns)`: the chat format,
the stop tokens (end of turn, EOS) and the Env methods that only read the task's messages live here.
"""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

from reinforge.envs.chat_format import ChatFormat
from reinforge.tasks.task import Task


class ChatGameEnv:
    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_turns: int):
        self.tokenizer = tokenizer
        self.max_turns = max_turns
        self.chat = ChatFormat(tokenizer)
        self.stop_token_ids = tuple(dict.fromkeys([self.chat.end_of_turn_id, tokenizer.eos_token_id]))

    def prompt_ids(self, task: Task) -> list[int]:
        return self.chat.prompt_ids(task.prompt)

    def decode_response(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def demonstration_turns(self, task: Task) -> list[str]:
        return [str(m["content"]) for m in task.demonstration or [] if m.get("role") == "assistant"]

    def sft_example(self, task: Task) -> tuple[list[int], list[bool]]:
        return self.chat.demonstration_ids(self.prompt_ids(task), list(task.demonstration or []))


def check_chat_game_config(cfg, game_name: str, max_moves: int, what: str) -> None:
    """The config checks every chat game env shares (`what`: "game", "text game"): no tools, chat
    prompts, a turn cap that lets a game end, and the game's result as the reward."""
    from reinforge.config import ConfigError
    from reinforge.import_paths import is_import_path

    env = cfg.env
    if env.tools or env.params:
        raise ConfigError(f"env.type={env.type} takes no env.tools or env.params; the game is set in task.params (docs/games.md)")
    if cfg.rollout.prompt_format == "raw":
        raise ConfigError(f"env.type={env.type} lays out the game as chat messages; rollout.prompt_format=raw cannot hold them (use auto or chat)")
    if env.max_turns < max_moves:
        raise ConfigError(
            f"env.max_turns={env.max_turns} would cut {game_name} games before their own end: it counts every attempted "
            f"move, and a game can take {max_moves} moves; set env.max_turns >= {max_moves} (a few more leave room for "
            "illegal attempts)"
        )
    fns = [c.fn for c in cfg.reward.components]
    if "env_reward" not in fns or any(fn != "env_reward" and not is_import_path(fn) for fn in fns):
        raise ConfigError(
            f"reward.components use {fns}: a {what}'s reward is its result, reported as the env reward; set "
            "reward.components: [{name: game, fn: env_reward}] (your own reward functions by import path may be added)"
        )
