"""The prompt-value model: the current policy's pass rate on a prompt, predicted before sampling it.

V0 (Zhang et al., "V0: A Generalist Value Model for Any Policy at State Zero", 2026, arXiv:2602.03584)
predicts a policy's success on a prompt at "state zero" (before any response token) from the prompt
and a context of the policy's recent (instruction, performance) pairs, so that the same predictor
follows the policy as it changes without being refitted to its parameters. This model keeps that
shape at the scale of a tiny policy:

    p_hat(x) = sigmoid(MLP([e(x), logit(m_global), logit(m_near(x))]))

- e(x): the prompt's representation, the policy's own last hidden states mean-pooled over the prompt
  tokens and L2-normalized (reinforge.values.features; detached, no gradient reaches the policy);
- m_global: the mean pass rate of the last `memory_groups` groups (the policy's recent level);
- m_near(x): the same groups' pass rates weighted by softmax(cos(e(x), e_j) / 0.05), the policy's
  recent results on prompts like x (V0's in-context profile, as a kernel average instead of V0's
  TabPFN head).

Trained online (unlike V0, which is pre-trained and frozen) from every group's outcome: binary
cross-entropy of p_hat against the group's pass rate, weighted by its size, on a replay buffer of the
most recent `buffer_groups` groups, `updates_per_step` AdamW steps per RL step. A group's summary is
stored as it was when its prediction was made, so training never sees its own outcome in its input.
"""

from __future__ import annotations

import copy
import math
from collections import deque

import torch
from torch import nn

SUMMARY_FEATURES = 2
NEIGHBOUR_TEMPERATURE = 0.05  # cosine similarities of pooled states sit close together: a sharp kernel
MINI_BATCH = 256
EPS = 1e-3  # pass rates are clipped to [EPS, 1 - EPS] before a logit


def rate_logit(rate: torch.Tensor) -> torch.Tensor:
    rate = rate.clamp(EPS, 1 - EPS)
    return torch.log(rate) - torch.log1p(-rate)


class PromptValueNet(nn.Module):
    def __init__(self, embed_dim: int, hidden: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(embed_dim + SUMMARY_FEATURES, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, embeddings: torch.Tensor, summaries: torch.Tensor) -> torch.Tensor:
        """Logits [K] of the pass rate, from normalized embeddings [K, d] and summaries [K, 2] (logits)."""
        return self.net(torch.cat([embeddings, summaries], dim=1)).squeeze(1)


class PromptValueModel:
    def __init__(
        self, embed_dim: int, hidden: int = 64, lr: float = 3e-3, updates_per_step: int = 20,
        buffer_groups: int = 512, memory_groups: int = 128, seed: int = 0,
    ):
        self.embed_dim = embed_dim
        with torch.random.fork_rng(devices=[]):  # its own init: the run's global RNG stream is left as it was
            torch.manual_seed(seed)
            self.net = PromptValueNet(embed_dim, hidden).double()
        self.optimizer = torch.optim.AdamW(self.net.parameters(), lr=lr)
        self.updates_per_step = updates_per_step
        self.generator = torch.Generator().manual_seed(seed)
        # Training examples: (embedding, summary at prediction time, pass rate, group size).
        self.buffer: deque[tuple[torch.Tensor, torch.Tensor, float, int]] = deque(maxlen=buffer_groups)
        # The policy's recent results: (embedding, pass rate, prediction made before sampling, group size).
        self.memory: deque[tuple[torch.Tensor, float, float, int]] = deque(maxlen=memory_groups)

    @staticmethod
    def normalize(embeddings: torch.Tensor) -> torch.Tensor:
        return nn.functional.normalize(embeddings.double(), dim=1)

    def summaries(self, embeddings: torch.Tensor) -> torch.Tensor:
        """[K, 2] logits of (recent mean pass rate, recent pass rate near each prompt); 0.5 before any result."""
        if not self.memory:
            return torch.zeros(len(embeddings), SUMMARY_FEATURES, dtype=torch.float64)
        keys = torch.stack([m[0] for m in self.memory])
        rates = torch.tensor([m[1] for m in self.memory], dtype=torch.float64)
        weights = torch.softmax(self.normalize(embeddings) @ keys.T / NEIGHBOUR_TEMPERATURE, dim=1)
        near = weights @ rates
        overall = rates.mean().expand(len(embeddings))
        return torch.stack([rate_logit(overall), rate_logit(near)], dim=1)

    @torch.no_grad()
    def predict(self, embeddings: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Predicted pass rates [K] and the summaries [K, 2] they were made with."""
        if embeddings.dim() != 2 or embeddings.shape[1] != self.embed_dim:
            raise ValueError(f"embeddings must be [K, {self.embed_dim}], got {tuple(embeddings.shape)}")
        summaries = self.summaries(embeddings)
        return torch.sigmoid(self.net(self.normalize(embeddings), summaries)), summaries

    def observe(
        self, embeddings: torch.Tensor, summaries: torch.Tensor, predictions: torch.Tensor,
        pass_rates: torch.Tensor, group_sizes: torch.Tensor,
    ) -> None:
        """Add G finished groups (their embeddings, summaries and predictions from before sampling)."""
        keys = self.normalize(embeddings)
        for key, summary, predicted, rate, n in zip(keys, summaries, predictions.tolist(), pass_rates.tolist(), group_sizes.tolist()):
            self.buffer.append((key, summary.double(), float(rate), int(n)))
            self.memory.append((key, float(rate), float(predicted), int(n)))

    def fit(self) -> float:
        """`updates_per_step` AdamW steps on mini-batches of the buffer; the mean loss (nats), or nan with no data."""
        if not self.buffer:
            return math.nan
        keys = torch.stack([b[0] for b in self.buffer])
        summaries = torch.stack([b[1] for b in self.buffer])
        rates = torch.tensor([b[2] for b in self.buffer], dtype=torch.float64)
        sizes = torch.tensor([b[3] for b in self.buffer], dtype=torch.float64)
        losses = []
        for _ in range(self.updates_per_step):
            rows = torch.randperm(len(rates), generator=self.generator)[:MINI_BATCH]
            logits = self.net(keys[rows], summaries[rows])
            loss = nn.functional.binary_cross_entropy_with_logits(logits, rates[rows], weight=sizes[rows] / sizes[rows].mean())
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            losses.append(loss.item())
        return sum(losses) / len(losses)

    def prior_variance(self, floor: float) -> float:
        """tau^2, the variance of the prediction's error about the true pass rate, from the recent groups:
        E[(r_bar - p_hat)^2] - E[p_hat (1 - p_hat) / n] (the observed squared error less the binomial
        noise of an n-sample mean), at least `floor`; 0.25 (the largest a pass rate's error can be)
        before any result."""
        if not self.memory:
            return 0.25
        rates = torch.tensor([m[1] for m in self.memory], dtype=torch.float64)
        predicted = torch.tensor([m[2] for m in self.memory], dtype=torch.float64)
        sizes = torch.tensor([m[3] for m in self.memory], dtype=torch.float64)
        excess = (rates - predicted).pow(2).mean() - (predicted * (1 - predicted) / sizes).mean()
        return max(floor, excess.item())

    def snapshot(self) -> PromptValueModel:
        """A frozen copy that predicts exactly as this model does now (its net and its memory of recent
        results), for a thread that draws prompts while this one goes on training (the async producer).
        It has no replay buffer or optimizer: it is never trained."""
        twin = copy.copy(self)
        twin.net = copy.deepcopy(self.net)
        twin.memory = deque(self.memory, maxlen=self.memory.maxlen)  # entries are never changed in place: shared
        twin.buffer, twin.optimizer, twin.generator = deque(maxlen=0), None, None
        return twin

    def snapshot_state(self) -> dict:
        """What a snapshot predicts with (a checkpoint's copy of it)."""
        return {"net": copy.deepcopy(self.net.state_dict()), "memory": list(self.memory)}

    def snapshot_from_state(self, state: dict) -> PromptValueModel:
        twin = self.snapshot()
        twin.net.load_state_dict(state["net"])
        twin.memory.clear()
        twin.memory.extend(state["memory"])
        return twin

    def state_dict(self) -> dict:
        return {
            "net": self.net.state_dict(), "optimizer": self.optimizer.state_dict(), "generator": self.generator.get_state(),
            "buffer": list(self.buffer), "memory": list(self.memory),
        }

    def load_state_dict(self, state: dict) -> None:
        self.net.load_state_dict(state["net"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.buffer.clear()
        self.buffer.extend(state["buffer"])
        self.memory.clear()
        self.memory.extend(state["memory"])
