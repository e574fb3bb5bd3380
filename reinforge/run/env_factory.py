"""The environment a config asks for: single-turn, a multi-turn tool env, games (games.env: several
players; textgames.env: single-agent text games), an agent program through the gateway
(gateway.env), or the user's own env class by import path (envs.user_env)."""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

from reinforge.config import Config, ConfigError
from reinforge.envs.base import Env
from reinforge.envs.single_turn import PromptFormatError, SingleTurnEnv
from reinforge.envs.tool_env import ToolEnv
from reinforge.envs.tools.builtin import build_tools
from reinforge.envs.tools.sandbox import SandboxUnavailableError
from reinforge.envs.tools.registry import ToolDefinitionError, ToolRegistry
from reinforge.gateway.env_config import build_gateway_env, check_gateway_env, check_not_gateway
from reinforge.envs.user_env import build_user_env, check_user_env
from reinforge.import_paths import ImportPathError, is_import_path

BUILTIN_ENVS = ("single_turn", "tool", "game", "text_game", "gateway")


def tool_registry(cfg: Config) -> ToolRegistry:
    try:
        return build_tools(cfg.env.tools, cfg.env.tool_options)
    except (ToolDefinitionError, SandboxUnavailableError, ValueError, OSError) as err:
        raise ConfigError(f"env.tools / env.tool_options: {err}") from None


def check_env_config(cfg: Config) -> None:
    """Before any model is loaded: tool names and options (a database or document file that
    cannot be opened fails here), and settings that only mean something for one env type."""
    env = cfg.env
    if cfg.task.source == "game" and env.type != "game":
        raise ConfigError(f"task.source=game describes games, which only env.type=game plays (env.type={env.type}; docs/games.md)")
    if cfg.task.source == "text_game" and env.type != "text_game":
        raise ConfigError(f"task.source=text_game describes puzzles, which only env.type=text_game plays (env.type={env.type}; docs/games.md)")
    for i, component in enumerate(cfg.reward.components):
        if component.fn == "env_reward" and not is_import_path(env.type) and env.type not in ("game", "text_game"):
            raise ConfigError(
                f"reward.components[{i}] ({component.name}): env_reward is the env's own reward, which env.type={env.type} "
                "never reports; name an env by import path (a gym / SkyRL / TRL / verifiers env, or your Env class that "
                "sets StepResult.info['env_reward']; docs/adapters.md)"
            )
    if env.type == "gateway":
        check_gateway_env(cfg)
        return
    check_not_gateway(cfg)
    if is_import_path(env.type):
        if env.tools:
            raise ConfigError(f"env.tools={env.tools} are the built-in tool env's; your env {env.type} runs its own tools")
        try:
            check_user_env(cfg)
        except (ImportPathError, ConfigError) as err:
            raise ConfigError(f"env.type: {err}") from None
        return
    if env.params:
        raise ConfigError(f"env.params={env.params} are for your own env class (env.type by import path); env.type={env.type} takes none")
    if env.type not in BUILTIN_ENVS:
        raise ConfigError(
            f"env.type: unknown env {env.type!r}; built-in: {', '.join(BUILTIN_ENVS)}; "
            "or your own as 'package.module:MyEnv' or './env.py:MyEnv' (docs/extending.md)"
        )
    if env.type == "game":
        from reinforge.games.config_check import check_game_config

        check_game_config(cfg)
        return
    if env.type == "text_game":
        from reinforge.textgames.config_check import check_text_game_config

        check_text_game_config(cfg)
        return
    if env.type == "single_turn":
        if env.tools:
            raise ConfigError(f"env.tools={env.tools} but env.type=single_turn never calls tools; set env.type=tool")
        return
    if not env.tools:
        raise ConfigError("env.type=tool needs at least one tool in env.tools (calculator, python, sql, search)")
    if cfg.rollout.prompt_format == "raw":
        raise ConfigError("env.type=tool formats episodes as chat turns; rollout.prompt_format=raw cannot hold tool messages (use auto or chat)")
    tool_registry(cfg)


def build_env(cfg: Config, tokenizer: PreTrainedTokenizerBase) -> Env:
    if cfg.env.type == "gateway":
        return build_gateway_env(cfg, tokenizer)
    if is_import_path(cfg.env.type):
        return build_user_env(cfg, tokenizer)
    if cfg.env.type == "game":
        from reinforge.games.env import GameEnv
        from reinforge.games.spec import parse_spec

        spec, _ = parse_spec(cfg.task.params, list(cfg.policies))
        return GameEnv(tokenizer, cfg.env.max_turns, spec.opponent_pool, cfg.trainer.seed, spec.ratings)
    if cfg.env.type == "text_game":
        from reinforge.textgames.env import TextGameEnv

        return TextGameEnv(tokenizer, cfg.env.max_turns)
    if cfg.env.type == "single_turn":
        try:
            return SingleTurnEnv(tokenizer, cfg.rollout.prompt_format)
        except PromptFormatError as err:
            raise ConfigError(f"rollout.prompt_format: {err}") from None
    e = cfg.env
    return ToolEnv(
        tokenizer, tool_registry(cfg), e.tool_format, e.max_turns, e.max_observation_tokens, e.tool_timeout_s,
        e.valid_call_reward,
    )
