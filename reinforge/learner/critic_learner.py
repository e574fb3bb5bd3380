"""The critic learner: fits a ValueModel to value targets (returns) with AdamW over micro-batches."""

from __future__ import annotations

import torch

from reinforge.algos.losses.value import explained_variance, get_value_loss
from reinforge.learner.batch import TrainingBatch, micro_batches
from reinforge.models.value_model import ValueModel


class CriticLearner:
    def __init__(
        self,
        value_model: ValueModel,
        lr: float,
        max_grad_norm: float = 1.0,
        micro_batch_size: int = 64,
        loss: str = "mse",
        clip_eps: float | None = 0.2,
        support: tuple[float, float] = (-1.0, 1.5),
        sigma: float | None = None,
        max_tokens_per_microbatch: int | None = None,
    ):
        """`loss`: a name in reinforge.algos.losses.value.VALUE_LOSSES. `clip_eps` is PPO2's value
        clip (mse only; None turns it off). `support` and `sigma` are HL-Gauss's (hl_gauss only):
        the support must be the one the value model's bins were built on. `max_tokens_per_microbatch`:
        micro-batches by a token budget instead of `micro_batch_size` rows (as the policy's)."""
        if max_tokens_per_microbatch is not None and max_tokens_per_microbatch <= 0:
            raise ValueError(f"algo.max_tokens_per_microbatch must be a positive number of tokens or None, got {max_tokens_per_microbatch}")
        self.max_tokens_per_microbatch = max_tokens_per_microbatch
        self.spec = get_value_loss(loss)
        self.loss_name = loss
        if self.spec.uses_bins:
            if value_model.num_bins is None:
                raise ValueError(f"value loss {loss!r} needs a ValueModel with num_bins; this one predicts scalar values")
            if tuple(map(float, support)) != value_model.support:
                raise ValueError(f"value loss support {tuple(support)} differs from the value model's bins {value_model.support}")
        elif value_model.num_bins is not None:
            raise ValueError(f"value loss {loss!r} trains a scalar head; build the ValueModel with num_bins=None")
        self.model = value_model
        # What built this learner: a sharded critic builds its ranks' learners the same way (reinforge.distributed.critic_group).
        self.options = dict(
            lr=lr, max_grad_norm=max_grad_norm, micro_batch_size=micro_batch_size, loss=loss, clip_eps=clip_eps, support=support,
            sigma=sigma, max_tokens_per_microbatch=max_tokens_per_microbatch,
        )
        self.optimizer = torch.optim.AdamW(value_model.parameters(), lr=lr, weight_decay=0.0)
        self.device = next(value_model.parameters()).device  # micro-batches move there; results come back to the CPU
        self.max_grad_norm = max_grad_norm
        self.micro_batch_size = micro_batch_size
        self.clip_eps = clip_eps
        self.support = value_model.support
        self.sigma = sigma
        self.version = 0  # optimizer steps taken

    @torch.no_grad()
    def values(self, batch: TrainingBatch) -> torch.Tensor:
        """V at every position of `batch` under the current weights: [N, T], zero outside loss_mask."""
        was_training = self.model.training
        self.model.eval()
        out = torch.zeros(batch.loss_mask.shape, dtype=torch.float32)
        for rows in micro_batches(batch.attention_mask, self.micro_batch_size, self.max_tokens_per_microbatch):
            micro = batch.select(rows).to(self.device)
            v = self.model(micro.input_ids, micro.attention_mask)
            out[rows, : v.shape[1]] = v.to(out.device)
        self.model.train(was_training)
        return out * batch.loss_mask

    def train_step(self, batch: TrainingBatch, returns: torch.Tensor, old_values: torch.Tensor) -> dict[str, float]:
        """One AdamW step on `batch`: loss = sum of per-token losses over loss_mask / masked tokens.

        returns, old_values: [N, T] aligned with batch.loss_mask (old_values = `values(batch)` at
        rollout time; only the mse loss's clip uses them).
        """
        if returns.shape != batch.loss_mask.shape or old_values.shape != batch.loss_mask.shape:
            raise ValueError(
                f"returns {tuple(returns.shape)} and old_values {tuple(old_values.shape)} must match loss_mask {tuple(batch.loss_mask.shape)}"
            )
        model = self.trained_model
        model.eval()  # dropout off, as in `values`: the clipped value loss compares the two
        self.optimizer.zero_grad(set_to_none=True)
        normalizer = self.loss_normalizer(batch)
        predicted = torch.zeros(batch.loss_mask.shape, dtype=torch.float32)
        loss_sum, clipped_tokens = 0.0, 0.0
        micros = micro_batches(batch.attention_mask, self.micro_batch_size, self.max_tokens_per_microbatch)
        for rows in micros:
            micro = batch.select(rows).to(self.device)
            width = micro.loss_mask.shape[1]
            micro_returns, micro_old = returns[rows, :width].to(self.device), old_values[rows, :width].to(self.device)
            per_token, metrics, values = self.micro_loss(micro, micro_returns, micro_old)
            loss = per_token.sum() / normalizer
            loss.backward()
            loss_sum += loss.item()
            clipped_tokens += metrics.get("value_clip_frac", 0.0) * micro.num_loss_tokens
            predicted[rows, :width] = values.detach().to(predicted.device)
        self.pad_micro_batches(batch, len(micros))
        grad_norm = self.clip_gradients()
        if not torch.isfinite(grad_norm):
            raise FloatingPointError(f"non-finite critic gradient norm ({grad_norm}) at critic version {self.version}")
        self.optimizer.step()
        self.version += 1
        return self.step_metrics(predicted, returns, batch.loss_mask, loss_sum, clipped_tokens, normalizer, grad_norm)

    @property
    def trained_model(self) -> torch.nn.Module:
        """The model the update trains (here `model`; a sharded critic's rank 0 trains a sharded copy)."""
        return self.model

    def loss_normalizer(self, batch: TrainingBatch) -> float:
        """What the summed per-token losses are divided by: the batch's masked tokens."""
        return float(max(batch.num_loss_tokens, 1))

    def micro_loss(self, micro: TrainingBatch, returns: torch.Tensor, old_values: torch.Tensor) -> tuple[torch.Tensor, dict, torch.Tensor]:
        """Per-token losses [n, T] of one micro-batch, the loss's metrics, and the predicted values."""
        if self.spec.uses_bins:
            logits = self.trained_model.logits(micro.input_ids, micro.attention_mask)
            per_token, metrics = self.spec.fn(logits, returns, micro.loss_mask, self.support, self.sigma)
            values = self.trained_model.values_from_logits(logits.detach())
        else:
            values = self.trained_model(micro.input_ids, micro.attention_mask)
            per_token, metrics = self.spec.fn(values, old_values, returns, micro.loss_mask, self.clip_eps)
        return per_token, metrics, values

    def pad_micro_batches(self, batch: TrainingBatch, done: int) -> None:
        """Nothing here: a sharded critic's ranks run extra passes so that all run as many."""

    def clip_gradients(self) -> torch.Tensor:
        """Clip to max_grad_norm; the norm before clipping."""
        return torch.nn.utils.clip_grad_norm_(self.trained_model.parameters(), self.max_grad_norm)

    def step_metrics(
        self, predicted: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, loss_sum: float, clipped_tokens: float,
        normalizer: float, grad_norm: torch.Tensor,
    ) -> dict[str, float]:
        metrics = {
            "value_loss": loss_sum,
            "explained_variance": explained_variance(predicted, returns, mask),
            "value_mean": (predicted * mask).sum().item() / normalizer,
            "value_grad_norm": grad_norm.item(),
        }
        if not self.spec.uses_bins:
            metrics["value_clip_frac"] = clipped_tokens / normalizer
        return metrics
