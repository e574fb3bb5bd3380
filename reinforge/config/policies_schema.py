"""The `policies:` section: the trainable policies of a run, each its own model, learner and engine.

    policies:                         # default: one policy named `policy`
      describer: {}                   # starts from the run's model (model.path, or the tiny model), warmed up on its seats
      guesser: {model: path/to/hf}    # starts from a model of its own (no warm-up for it)

On the command line a list of names replaces the recipe's mapping: `policies=[describer, guesser]`.
Several policies play the seats of a game (env.type=game: `task.params.train_seats` names them);
every other run trains one. A one-policy run keeps the layout of runs before this section
(metrics unprefixed, `final/`); several keep theirs (`policy/<name>/...`, `final/<name>/`).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from reinforge.config.section import ConfigError, Section

DEFAULT_POLICY = "policy"


class PolicyConfig(Section):
    model: str | None = Field(
        None,
        description="A Hugging Face model directory, Hub id or GGUF file this policy starts from (no warm-up for it); "
        "default: the run's model (model.path, or the tiny model built from trainer.seed), warmed up on this policy's seats.",
    )


def default_policies() -> dict[str, PolicyConfig]:
    return {DEFAULT_POLICY: PolicyConfig()}


def policies_from_names(value: Any) -> Any:
    """`policies=[a, b]` (a list of names, the command line's way to replace the recipe's mapping)
    means `{a: {}, b: {}}`; a name given twice is an error naming it."""
    if isinstance(value, (list, tuple)):
        names = [str(n) for n in value]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"policy {twice[0]!r} is named twice in {names}")
        return {name: {} for name in names}
    return value


def check_policy_names(policies: dict[str, PolicyConfig]) -> dict[str, PolicyConfig]:
    if not policies:
        raise ValueError("name at least one trainable policy (default: {policy: {}})")
    for name in policies:
        if not name or "/" in name:
            raise ValueError(f"policy name {name!r}: a name is a non-empty path segment (it names run directories and metrics)")
    return policies


MOVED_FROM_TASK_PARAMS = (
    "task.params.policies moved to the top-level `policies:` section (a mapping name -> options); write "
    "`policies: {describer: {}, guesser: {model: DIR}}` in the recipe, or `policies=[describer, guesser]` on the command line"
)


def check_policies_play_a_game(cfg) -> None:
    """Several policies are the seats of a game; every other run samples and trains one model."""
    names = list(cfg.policies)
    if len(names) > 1 and (cfg.env.type != "game" or cfg.task.source != "game"):
        raise ConfigError(
            f"policies={names}: several trainable policies play the seats of a game (env.type=game, task.source=game; "
            f"docs/games.md), not env.type={cfg.env.type} with task.source={cfg.task.source}; name one policy"
        )
