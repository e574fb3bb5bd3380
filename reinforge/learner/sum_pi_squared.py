"""The policy's probability of each sampled token and the sum of its squared probabilities over the
vocabulary, sum_v pi(v)^2, for the optimal token baseline (reinforge.algos.advantages.optimal_token_baseline)."""

from __future__ import annotations

import torch

from reinforge.learner.batch import TrainingBatch, micro_batches


@torch.no_grad()
def logprobs_and_sum_pi_squared(model: torch.nn.Module, batch: TrainingBatch, micro_batch_size: int, temperature: float = 1.0):
    """([N, T-1] log pi(token_{t+1}), [N, T-1] sum_v pi_t(v)^2) under `model`'s current weights,
    at the sampling temperature; 0 where the next token is a pad.

        sum_v pi(v)^2 = exp(logsumexp(2 z) - 2 logsumexp(z)),   z = logits / temperature

    (verl's calculate_sum_pi_squared_from_logits). One no-grad forward of the model's own, with its
    whole [rows, T, vocabulary] logits, micro_batch_size rows at a time: the chunked and packed
    log-prob paths do not surface the logits this needs."""
    device = next(model.parameters()).device
    n, width = batch.input_ids.shape
    chosen = torch.zeros(n, width - 1)
    squares = torch.zeros(n, width - 1)
    for rows in micro_batches(batch.attention_mask, micro_batch_size):
        ids, attention = batch.input_ids[rows].to(device), batch.attention_mask[rows].to(device)
        logits = model(input_ids=ids, attention_mask=attention, use_cache=False).logits[:, :-1].float() / temperature
        normalizer = logits.logsumexp(-1)
        predicts = attention[:, 1:].bool()
        token = logits.gather(-1, ids[:, 1:, None]).squeeze(-1) - normalizer
        chosen[rows] = torch.where(predicts, token, torch.zeros_like(token)).cpu()
        square = (torch.logsumexp(2.0 * logits, -1) - 2.0 * normalizer).exp()
        squares[rows] = torch.where(predicts, square, torch.zeros_like(square)).cpu()
    return chosen, squares
