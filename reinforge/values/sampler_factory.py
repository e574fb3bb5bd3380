"""The task sampler a run's config asks for: the plain shuffled one, or the curriculum sampler with a
value model per policy featurized by that policy's own prompt states."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from reinforge.config import PromptValueConfig
from reinforge.tasks.task import Task
from reinforge.tasks.task_sampler import TaskSampler
from reinforge.values.curriculum_sampler import CurriculumSampler
from reinforge.values.item_seats import game_seats, one_seat
from reinforge.values.policy_values import Featurize


def make_task_sampler(
    tasks: list[Task], seed: int, cfg: PromptValueConfig, models: Mapping | None = None, env=None, env_type: str = "single_turn",
    metric_prefixes: Mapping[str, str] | None = None,
) -> TaskSampler | CurriculumSampler:
    """The plain shuffled sampler unless the prompt_value section asks for more. `models`: each
    policy's model by name (its prompt states are its value model's features)."""
    if not cfg.enabled and cfg.curriculum == "uniform":
        return TaskSampler(tasks, seed)
    featurizers = dims = None
    seats_of = None
    if cfg.enabled:
        from reinforge.values.features import prompt_states

        pad = env.tokenizer.pad_token_id

        def featurizer(model) -> Featurize:
            def featurize(batch: list[Task], by=model) -> torch.Tensor:  # `by`: the weights that sample (see next_batch)
                return prompt_states(by, env, batch, pad)

            return featurize

        featurizers = {name: featurizer(model) for name, model in models.items()}
        dims = {name: model.config.hidden_size for name, model in models.items()}
        seats_of = game_seats(env) if env_type == "game" else one_seat(next(iter(models)))
    return CurriculumSampler(tasks, seed, cfg, featurizers, dims, seats_of, metric_prefixes)
