"""The learned heads beside the policy (issue 17, this half): the success head and turn progress.

`ValueHeads` holds what the config turns on: the success head (reinforge.learner.success_head_learner;
rollout pruning, value-guided voting at evaluation) and the SPA progress estimator
(reinforge.values.turn_progress). `ValueHeadsCollector` wraps the schedule's group collector (in
an async run it runs on the producer's thread, beside the weights that sampled): before a step it
gives the engine a pruning hook (once the head is warm), after it trains the heads on the scored
batch's newest samples (`newest_samples`) and sets the progress turn rewards. Its state (both heads) rides in the
schedule's checkpoint state, so a resumed run continues with the same heads, buffers and generators.
"""

from __future__ import annotations

import time
from pathlib import Path


from reinforge.config import Config
from reinforge.learner.success_head_learner import SuccessHeadLearner
from reinforge.rollout.trajectory import Trajectory
from reinforge.runtime.checkpoint import list_checkpoints, load_state
from reinforge.values.rollout_pruning import PruningHook, pruning_metrics
from reinforge.values.turn_progress import TurnProgress


def newest_samples(trajectories: list[Trajectory]) -> list[Trajectory]:
    """The staleness filter of the value heads: only the samples of the newest policy version in
    the batch train them. A value head estimates the success or progress of the policy as it is
    now (ARRoL's quality head and SPA's progress estimator are both trained on the current policy's
    rollouts); a partial rollout resumed from older weights (APRIL), whose `policy_version` is the
    oldest that sampled any of its tokens, describes a policy already left behind. In a sync run,
    and in an async one without partial rollouts, every sample of a batch has the same version and
    nothing is dropped (`value_heads/stale_dropped` counts what is)."""
    newest = max((t.policy_version for t in trajectories), default=0)
    return [t for t in trajectories if t.policy_version == newest]


class ValueHeads:
    def __init__(self, cfg: Config, model):
        self.model = model  # the learner's policy: in a sync run, the weights that sampled the batch
        self.producer_holds_weights = cfg.trainer.schedule == "async"  # the producer's engine copy sampled it
        vocab = model.config.vocab_size
        seed = cfg.trainer.seed + 20_000  # streams of their own (head init, minibatch draws)
        s, p = cfg.success_head, cfg.progress
        self.success = SuccessHeadLearner(s, vocab, cfg.rollout.max_new_tokens, seed) if s.enabled else None
        self.prune = s.enabled and s.prune
        self.voting = s.enabled and s.eval_voting and cfg.eval.samples >= 2
        self.progress = TurnProgress(p, vocab, seed + 1) if p.enabled else None

    @property
    def voting_ready(self) -> bool:
        """Voting is reported once the head has trained (an untrained head's votes are noise)."""
        return self.voting and self.success.steps_trained > 0

    def response_scores(self, trajectories: list[Trajectory]) -> list[float]:
        """p(success) of whole responses, for value-guided voting (reinforge.evals.value_voting)."""
        return self.success.score_responses(self.model, trajectories)

    def state_dict(self) -> dict:
        return {
            "success": self.success.state_dict() if self.success else None,
            "progress": self.progress.state_dict() if self.progress else None,
        }

    def load_state_dict(self, state: dict) -> None:
        for name in ("success", "progress"):
            head = getattr(self, name)
            if head is not None and state.get(name) is not None:
                head.load_state_dict(state[name])


def build_value_heads(cfg: Config, model) -> ValueHeads | None:
    if not (cfg.success_head.enabled or cfg.progress.enabled):
        return None
    return ValueHeads(cfg, model)


class ValueHeadsCollector:
    """A GroupCollector with pruning during sampling and the heads trained on what it collected."""

    def __init__(self, inner, heads: ValueHeads, group_size: int):
        self.inner, self.heads, self.group_size = inner, heads, group_size

    def collect(self, engine, step: int, weights_index: int):
        success = self.heads.success
        # The weights that sample: the learner's in a sync run (an engine outside this process, vLLM or
        # Ray workers, holds the same version); under async the learner's thread trains it meanwhile, and
        # the producer's own engine copy holds the weights of this batch.
        model = engine.model if self.heads.producer_holds_weights else self.heads.model
        # The pruning hook: inside the TorchEngine's decode loop, or between chunks of sampling on any
        # engine, where it reads the policy's logits at a prefix from `model` (reinforge.rollout.pruned_sampling).
        hook = PruningHook(success, self.group_size, model=model) if self.heads.prune and success.ready else None
        self.inner.decode_hook = hook
        collected, metrics = self.inner.collect(engine, step, weights_index)
        start = time.perf_counter()
        metrics = dict(metrics)
        if self.heads.prune:
            metrics.update(pruning_metrics(collected.trajectories, collected.pruned))
            metrics["prune/active"] = float(hook is not None)
        fresh = newest_samples(collected.trajectories)
        metrics["value_heads/stale_dropped"] = float(len(collected.trajectories) - len(fresh))
        if success is not None:
            metrics.update(success.update(model, fresh))
        if self.heads.progress is not None:
            metrics.update(self.heads.progress.assign(collected.trajectories, train_on=fresh))
        metrics["time/value_heads"] = time.perf_counter() - start
        return collected, metrics

    def state_dict(self) -> dict:
        return {"inner": self.inner.state_dict(), "heads": self.heads.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.inner.load_state_dict(state["inner"])
        self.heads.load_state_dict(state["heads"])


def success_head_for_eval(cfg: Config, model_dir: Path, model):
    """`reinforge eval`: the success head trained with the model being evaluated, as a
    `score_samples` for `evaluate`, or None (head off, or no checkpoint holds it).

    The head is read from the checkpoint of the same weights: `<run>/final` is the run's last step,
    whose checkpoint the loop always writes (trainer.checkpoint_every > 0); a checkpoint's own
    `model/` directory sits beside its state.pt."""
    if not (cfg.success_head.enabled and cfg.success_head.eval_voting and cfg.eval.samples >= 2):
        return None
    if (model_dir.parent / "state.pt").is_file():
        state_file = model_dir.parent / "state.pt"
    elif model_dir.name == "final" and (checkpoints := list_checkpoints(model_dir.parent)):
        state_file = checkpoints[-1] / "state.pt"
    else:
        print(f"reinforge: no checkpoint beside {model_dir} holds a success head: voting by the head is not reported")
        return None
    heads = load_state(state_file.parent).get("schedule", {}).get("collector", {}).get("heads")
    if not heads or heads.get("success") is None:
        print(f"reinforge: {state_file} holds no success head: voting by the head is not reported")
        return None
    learner = SuccessHeadLearner(cfg.success_head, model.config.vocab_size, cfg.rollout.max_new_tokens, cfg.trainer.seed)
    learner.load_state_dict(heads["success"])
    return lambda trajectories: learner.score_responses(model, trajectories)
