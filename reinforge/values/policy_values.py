"""One prompt-value model per policy: each predicts the success of the seats its policy plays, from
that policy's own prompt states (reinforge.values.features), so with several policies
(reinforge.values.item_seats) every prediction, outcome and metric is its policy's."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

from reinforge.config import PromptValueConfig
from reinforge.values.item_seats import ItemSeat
from reinforge.values.value_model import PromptValueModel

# (tasks[, the model whose states they are]) -> [K, d] prompt representations
Featurize = Callable[..., torch.Tensor]
ONE_POLICY = "policy"  # the policy's name when the caller names none (a run of one policy)


def per_policy(value) -> dict:
    """One policy's featurizer / width given alone, or a mapping policy name -> it."""
    if value is None:
        return {}
    return dict(value) if isinstance(value, Mapping) else {ONE_POLICY: value}


def value_models(featurizers: dict[str, Featurize], dims: dict[str, int], cfg: PromptValueConfig, seed: int) -> dict[str, PromptValueModel]:
    """A value model per policy that has a featurizer, seeded alike; none unless prompt_value.enabled."""
    if sorted(dims) != sorted(featurizers):
        raise ValueError(f"a featurizer and a width per policy: featurizers for {sorted(featurizers)}, widths for {sorted(dims)}")
    if not cfg.enabled:
        return {}
    return {
        name: PromptValueModel(dims[name], cfg.hidden, cfg.lr, cfg.updates_per_step, cfg.buffer_groups, cfg.memory_groups, seed + 1)
        for name in featurizers
    }


def predict_seats(
    seats: list[ItemSeat], featurizers: dict[str, Featurize], values: dict[str, PromptValueModel], draw_model,
) -> tuple[list, torch.Tensor, list]:
    """Each seat's embedding, prediction and summary, by its policy's featurizer and value model
    (`values`: the live models, or a version's; `draw_model`: the weights that sample, one policy's
    or per policy name; None: each featurizer's own)."""
    embeddings: list = [None] * len(seats)
    predicted = torch.zeros(len(seats), dtype=torch.float64)
    summaries: list = [None] * len(seats)
    for name, model in values.items():
        rows = [i for i, s in enumerate(seats) if s.policy == name]
        if not rows:
            continue
        views = [seats[i].view for i in rows]
        featurize = featurizers[name]
        by = draw_model.get(name) if isinstance(draw_model, Mapping) else draw_model
        features = featurize(views) if by is None else featurize(views, by)
        p, summary = model.predict(features)
        for k, i in enumerate(rows):
            embeddings[i], summaries[i] = features[k], summary[k]
        predicted[rows] = p.double()
    return embeddings, predicted, summaries
