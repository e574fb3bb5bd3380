"""A success head: the probability that a (partial) response will be judged a success.

ARRoL (Xu et al. 2026, "Prune as You Generate: Online Rollout Pruning for Faster and Better
RLVR", arXiv:2603.24840) trains a light "quality head" online on the policy's own state at a
prefix of a response, and prunes rollouts it predicts will fail; the same head, applied to whole
responses, weighs candidates at test time. This is that head, kept light enough to run inside the
decode loop:

    phi(prefix) = [ log softmax(z) / 10,  H(softmax z),  max softmax z,
                    mean_j logp_j,  min_j logp_j,  s / S,  [prefix is the whole response] ]
    p(success | prefix) = sigmoid(f(phi))     f linear (hidden=0) or a one-hidden-layer ReLU MLP

z are the policy's next-token logits after the prompt and the s sampled tokens, logp_j the
behaviour log-probs of those s tokens, S the token budget (rollout.max_new_tokens). Why logits and
not the last hidden state h: z = W_out RMSNorm(h), so when the vocabulary is at least the hidden
size a linear probe on z sees the normalized hidden state through a fixed linear map, and the
engine already has z at every step (no change to the decoder, no extra forward while sampling).
Trained by binary cross-entropy on (phi at prefixes of finished responses, success of the response).
"""

from __future__ import annotations

import torch
from torch import nn

EXTRA_FEATURES = 6  # entropy, max prob, mean / min sampled log-prob, fraction of the budget, whole-response flag
LOGPROB_FLOOR = -30.0  # log-probs below this carry no more information and would dominate a linear probe


def prefix_features(
    logits: torch.Tensor,
    logprob_sum: torch.Tensor,
    logprob_min: torch.Tensor,
    sampled: torch.Tensor,
    budget: int,
    whole: torch.Tensor,
) -> torch.Tensor:
    """phi for N prefixes: logits [N, V]; the sum, the min of each prefix's sampled log-probs and its
    token count s [N] (sum = min = 0 when s = 0); `whole` [N] marks whole responses. -> [N, V + 6]."""
    logp = logits.float().log_softmax(-1).clamp(min=LOGPROB_FLOOR)
    prob = logp.exp()
    entropy = -(prob * logp).sum(-1)
    count = sampled.float()
    extras = torch.stack(
        [entropy, prob.max(-1).values, logprob_sum.float() / count.clamp(min=1), logprob_min.float(), count / budget, whole.float()],
        dim=-1,
    )
    return torch.cat([logp / 10.0, extras], dim=-1)


class SuccessHead(nn.Module):
    """p(success | phi): a linear probe (hidden=0) or a small MLP over `prefix_features`."""

    def __init__(self, vocab_size: int, hidden: int = 0):
        super().__init__()
        width = vocab_size + EXTRA_FEATURES
        self.net = nn.Linear(width, 1) if hidden == 0 else nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """Logits of success [N]."""
        return self.net(features).squeeze(-1)

    @torch.no_grad()
    def probability(self, features: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self(features.to(next(self.parameters()).dtype)))
