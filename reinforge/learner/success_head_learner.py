"""Training the success head online, from finished rollouts' outcomes (ARRoL's quality head).

Each RL step, every scored trajectory gives examples from its final turn (a single-turn episode's
response; a multi-turn episode's last policy turn, the one the verifier checks): phi at the prefixes a pruning
check would have seen (s = every, 2 * every, ... < L sampled tokens) and at the whole response
(s = L), all labelled with the response's success (reward >= success_head.success_reward). phi
needs the policy's logits at those prefixes: one no-grad teacher-forced forward of the policy over
the step's trajectories (the weights that sampled them: the learner's in a sync run, the async
producer's own engine copy otherwise; reinforge.values.value_heads). The
examples join a FIFO buffer of the most recent `buffer_size`; the head then takes `train_steps`
Adam steps on minibatches drawn from it with its own seeded generator, so a resumed run draws the
same minibatches (buffer, head, optimizer and generator are all in `state_dict`).

Before training on a step's examples, the head is scored on them (`success_head/brier`,
`success_head/accuracy` on whole responses): each step's examples are unseen data, an honest
online calibration check. Pruned responses have no outcome and give no examples (a bias the
docs name: the head learns only from responses it let finish).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from reinforge.config import SuccessHeadConfig
from reinforge.models.success_head import SuccessHead, prefix_features
from reinforge.rollout.episode_parts import AGENT_ERROR
from reinforge.rollout.trajectory import Trajectory

FORWARD_ROWS = 64  # trajectories per teacher-forced forward (bounds the [rows, T, V] logits)
MINIBATCH = 256


def check_interval(check_every: int | None, budget: int) -> int:
    """Decode steps between pruning checks: success_head.check_every, or by default 4, and 1 for a
    turn of at most 4 tokens (a game's move: checked once its first token is chosen)."""
    if check_every is not None:
        return check_every
    return 4 if budget > 4 else 1


def check_positions(length: int, every: int) -> list[int]:
    """Prefix lengths s a response of `length` sampled tokens is seen at: the pruning checks it was
    alive at (every, 2 * every, ... < length), then the whole response."""
    return [*range(every, length, every), length]


@torch.no_grad()
def trajectory_features(model, trajectories: list[Trajectory], every: int, budget: int, whole_only: bool = False):
    """phi of trajectories' final turns at `check_positions` (or the whole response only) ->
    (features [M, V + 6], index [M] of the trajectory each row comes from)."""
    device = next(model.parameters()).device
    feats, owners = [], []
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(trajectories), FORWARD_ROWS):
            chunk = trajectories[start : start + FORWARD_ROWS]
            width = max(len(t.token_ids) for t in chunk)
            ids = torch.zeros(len(chunk), width, dtype=torch.long)
            mask = torch.zeros(len(chunk), width, dtype=torch.long)
            for row, t in enumerate(chunk):  # right padding: positions stay 0..n-1 as in sampling
                ids[row, : len(t.token_ids)] = torch.tensor(t.token_ids)
                mask[row, : len(t.token_ids)] = 1
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits.float().cpu()
            for row, t in enumerate(chunk):
                if not t.turn_spans:  # an episode that failed before the policy's first turn
                    continue
                prompt, end = t.turn_spans[-1]  # the final turn's response: the one the verifier checks
                length = end - prompt
                if length < 1:
                    continue
                logprobs = torch.tensor(t.behaviour_logprobs[prompt:end], dtype=torch.float32)
                positions = [length] if whole_only else check_positions(length, every)
                s = torch.tensor(positions)
                sums, mins = logprobs.cumsum(0)[s - 1], logprobs.cummin(0).values[s - 1]  # over the first s tokens
                feats.append(prefix_features(logits[row, prompt + s - 1], sums, mins, s, budget, s == length))
                owners += [start + row] * len(positions)
    finally:
        model.train(was_training)
    if not feats:
        return torch.zeros(0, 0), torch.zeros(0, dtype=torch.long)
    return torch.cat(feats), torch.tensor(owners)


class SuccessHeadLearner:
    """The head, its optimizer and its example buffer."""

    def __init__(self, cfg: SuccessHeadConfig, vocab_size: int, budget: int, seed: int):
        self.cfg, self.budget = cfg, budget
        self.every = check_interval(cfg.check_every, budget)
        with torch.random.fork_rng():  # the head's init must not move the run's global random stream
            torch.manual_seed(seed)
            self.head = SuccessHead(vocab_size, cfg.hidden)
        self.optimizer = torch.optim.Adam(self.head.parameters(), lr=cfg.lr)
        self.generator = torch.Generator().manual_seed(seed)
        self.features = torch.zeros(0, vocab_size + 6)
        self.labels = torch.zeros(0)
        self.steps_trained = 0

    def success(self, trajectory: Trajectory) -> bool:
        return trajectory.reward >= self.cfg.success_reward

    def update(self, model, trajectories: list[Trajectory]) -> dict[str, float]:
        """Add the examples of scored trajectories and train; returns success_head/* metrics."""
        # No outcome, no example: a pruned row, an agent episode without a result (every piece of it).
        usable = [t for t in trajectories if not t.reward_failures and not t.errors and t.finish_reason not in ("pruned", AGENT_ERROR)]
        features, owners = trajectory_features(model, usable, self.every, self.budget)
        if not len(owners):  # no policy turn among them (a game's seat that never got to move)
            return {"success_head/examples": float(len(self.labels))}
        labels = torch.tensor([float(self.success(usable[i])) for i in owners.tolist()])
        metrics: dict[str, float] = {}
        if self.steps_trained:  # scored before it trains on them: unseen data
            whole = features[:, -1] == 1
            p = self.head.probability(features[whole])
            metrics["success_head/brier"] = float(((p - labels[whole]) ** 2).mean())
            metrics["success_head/accuracy"] = float(((p >= 0.5).float() == labels[whole]).float().mean())
        self.features = torch.cat([self.features, features])[-self.cfg.buffer_size :]
        self.labels = torch.cat([self.labels, labels])[-self.cfg.buffer_size :]
        loss = torch.zeros(())
        for _ in range(self.cfg.train_steps):
            pick = torch.randint(len(self.labels), (min(MINIBATCH, len(self.labels)),), generator=self.generator)
            loss = F.binary_cross_entropy_with_logits(self.head(self.features[pick]), self.labels[pick])
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
        self.steps_trained += 1
        metrics.update({"success_head/loss": float(loss.detach()), "success_head/examples": float(len(self.labels)), "success_head/positive_frac": float(labels.mean())})
        return metrics

    @property
    def ready(self) -> bool:
        """Trained on at least `warmup_steps` steps: its predictions may prune."""
        return self.steps_trained >= self.cfg.warmup_steps

    def score_responses(self, model, trajectories: list[Trajectory]) -> list[float]:
        """p(success) of whole single-turn responses (value-guided voting at evaluation)."""
        features, owners = trajectory_features(model, trajectories, self.every, self.budget, whole_only=True)
        scores = [0.0] * len(trajectories)  # an empty response: nothing to score, least preferred
        if len(owners):
            for i, p in zip(owners.tolist(), self.head.probability(features).tolist()):
                scores[i] = p
        return scores

    def state_dict(self) -> dict:
        return {
            "head": self.head.state_dict(), "optimizer": copy.deepcopy(self.optimizer.state_dict()), "generator": self.generator.get_state(),
            "features": self.features.clone(), "labels": self.labels.clone(), "steps_trained": self.steps_trained,
        }

    def load_state_dict(self, state: dict) -> None:
        self.head.load_state_dict(state["head"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.features, self.labels, self.steps_trained = state["features"], state["labels"], state["steps_trained"]
