"""The learned heads beside the policy (issue 17, this half): the success head and turn progress.

`ValueHeads` holds what the config turns on: the success head (reinforge.learner.success_head_learner;
rollout pruning, value-guided voting at evaluation) and the SPA progress estimator
(reinforge.values.turn_progress). `ValueHeadsCollector` wraps the schedule's group collector (in
an async run it runs on the producer's thread, beside the weights that sampled): before a step it
gives the engine a pruning hook (once the head is warm), after it trains the heads on the scored
batch's newest samples (`newest_samples`) and sets the progress turn rewards. Its state (both heads) rides in the
schedule's checkpoint state, so a resumed run continues with the same heads, buffers and generators.

Several policies (a game's distinct models, `policies:`): each policy has a success head of its own,
trained on its own seats' trajectories with the features of its own logits, and prunes its own
generate calls. Not one shared head: the head's input is the sampling policy's next-token
distribution, and two models put different meanings on it (a shared linear probe would fit their
mixture), while their outcomes differ by role (the describer's clue, the guesser's answer). Their
metrics are logged per policy (`policy/<name>/success_head/*`); pruning's `prune/*` for the step.
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
    def __init__(self, cfg: Config, models: dict):
        first = next(iter(models.values()))
        self.models = models  # the learners' policies: in a sync run, the weights that sampled the batch
        self.model = first
        self.producer_holds_weights = cfg.trainer.schedule == "async"  # the producer's engine copy sampled it (one policy)
        seed = cfg.trainer.seed + 20_000  # streams of their own (head init, minibatch draws)
        s, p = cfg.success_head, cfg.progress
        # One head per policy; the first keeps the one-policy seed (another policy's: its own stream).
        self.successes = {
            name: SuccessHeadLearner(s, model.config.vocab_size, cfg.rollout.max_new_tokens, seed + 7919 * i)
            for i, (name, model) in enumerate(models.items())
        } if s.enabled else {}
        self.success = next(iter(self.successes.values()), None)  # the first policy's: evaluation voting
        self.prune = s.enabled and s.prune
        self.voting = s.enabled and s.eval_voting and cfg.eval.samples >= 2
        self.progress = TurnProgress(p, first.config.vocab_size, seed + 1) if p.enabled else None

    @property
    def voting_ready(self) -> bool:
        """Voting is reported once the head has trained (an untrained head's votes are noise)."""
        return self.voting and self.success.steps_trained > 0

    def response_scores(self, trajectories: list[Trajectory]) -> list[float]:
        """p(success) of whole responses, for value-guided voting (reinforge.evals.value_voting)."""
        return self.success.score_responses(self.model, trajectories)

    @property
    def several(self) -> bool:
        return len(self.models) > 1

    def state_dict(self) -> dict:
        """One policy: {"success": its head's state, "progress": ...}; several: "success" maps each policy's name to its head's."""
        if self.several and self.success is not None:
            success = {name: head.state_dict() for name, head in self.successes.items()}
        else:
            success = self.success.state_dict() if self.success else None
        return {"success": success, "progress": self.progress.state_dict() if self.progress else None}

    def load_state_dict(self, state: dict) -> None:
        if self.success is not None and state.get("success") is not None:
            for name, head in self.successes.items():
                head.load_state_dict(state["success"][name] if self.several else state["success"])
        if self.progress is not None and state.get("progress") is not None:
            self.progress.load_state_dict(state["progress"])


def build_value_heads(cfg: Config, models: dict) -> ValueHeads | None:
    """`models`: each policy's name -> its learner's model (one policy: one entry)."""
    if not (cfg.success_head.enabled or cfg.progress.enabled):
        return None
    return ValueHeads(cfg, models)


class ValueHeadsCollector:
    """A GroupCollector with pruning during sampling and the heads trained on what it collected.
    Several policies: `owner(trajectory, tasks)` names the policy that played a trajectory's seat,
    `prefix(name)` where its metrics go."""

    def __init__(self, inner, heads: ValueHeads, group_size: int, owner=None, prefix=None):
        self.inner, self.heads, self.group_size = inner, heads, group_size
        self.owner, self.prefix = owner, prefix

    def pruning_hook(self, model):
        """The step's hook: the one policy's, or each policy whose head is warm by name (None: none
        prunes yet). Chunked sampling reads the policy's logits at a prefix from `model` (one policy)
        or from each policy's own model (reinforge.rollout.pruned_sampling)."""
        if not self.heads.prune:
            return None
        if not self.heads.several:
            return PruningHook(self.heads.success, self.group_size, model=model) if self.heads.success.ready else None
        hooks = {name: PruningHook(head, self.group_size, model=self.heads.models[name])
                 for name, head in self.heads.successes.items() if head.ready}
        return hooks or None

    def collect(self, engine, step: int, weights_index: int):
        success = self.heads.success
        # The weights that sample: the learner's in a sync run (an engine outside this process, vLLM or
        # Ray workers, holds the same version); under async the learner's thread trains it meanwhile, and
        # the producer's own engine copy holds the weights of this batch.
        model = None if self.heads.several else engine.model if self.heads.producer_holds_weights else self.heads.model
        hook = self.pruning_hook(model)
        self.inner.decode_hook = hook
        collected, metrics = self.inner.collect(engine, step, weights_index)
        start = time.perf_counter()
        metrics = dict(metrics)
        if self.heads.prune:
            metrics.update(pruning_metrics(collected.trajectories, collected.pruned))
            metrics["prune/active"] = float(hook is not None)
        fresh = newest_samples(collected.trajectories)
        metrics["value_heads/stale_dropped"] = float(len(collected.trajectories) - len(fresh))
        if success is not None and self.heads.several:  # each head on its own policy's seats
            owners = [self.owner(t, collected.tasks) for t in fresh]
            for name, head in self.heads.successes.items():
                mine = [t for t, who in zip(fresh, owners) if who == name]
                own = head.update(self.heads.models[name], mine)
                metrics.update({self.prefix(name) + key: value for key, value in own.items()})
        elif success is not None:
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
    if not heads or heads.get("success") is None or "head" not in heads["success"]:  # several policies: one head each
        print(f"reinforge: {state_file} holds no success head: voting by the head is not reported")
        return None
    learner = SuccessHeadLearner(cfg.success_head, model.config.vocab_size, cfg.rollout.max_new_tokens, cfg.trainer.seed)
    learner.load_state_dict(heads["success"])
    return lambda trajectories: learner.score_responses(model, trajectories)
