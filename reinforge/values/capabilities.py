"""What each value feature supports, declared once (as `EstimatorSpec` declares what an estimator
needs), and the one check of a run's config against those declarations, before compute.

A feature that does not support something says why in `refusals`: the reason is the message. The
value heads (success head, turn progress) train only on the newest policy version's samples
(`reinforge.values.value_heads.newest_samples`), which is what lets them run under the async
schedule and partial rollouts. The prompt-value model and its curricula draw with a versioned copy
of themselves and learn from every group's outcome when it arrives
(`reinforge.values.draw_versions`, `reinforge.values.pending_predictions`), which is what lets them run with both and with dynamic sampling.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reinforge.config import Config, ConfigError

# An outcome per (item, trained seat), as the curricula read it: an episode's (single_turn, tool), a
# gateway agent episode's (its pieces are one episode), each trained seat's of a game (reinforge.values.item_seats).
ONE_OUTCOME_ENVS = ("single_turn", "tool", "game", "gateway")
# A game yields one trajectory per player, a gateway agent's episode comes in pieces (one per model call).
SPLIT_EPISODES = ("game", "gateway")


@dataclass(frozen=True)
class ValueFeatureSpec:
    switch: str  # the setting that turns the feature on, as the messages name it
    env_reason: str  # what it needs of an episode
    only_envs: tuple[str, ...] | None = None  # env.type values it serves (None: any but refused_envs)
    refused_envs: tuple[str, ...] = ()
    async_schedule: bool = True
    partial: bool = True
    dynamic_sampling: bool = True
    decode_loop_envs: tuple[str, ...] = ()  # env.type values where it needs the in-process TorchEngine's decode loop
    async_in_process: bool = False  # ... under trainer.schedule=async only (the producer's own engine serves it)
    refusals: dict[str, str] = field(default_factory=dict)  # capability -> why not (and what to set)


SPECS = {
    # Async, partial rollouts, dynamic sampling: the curriculum draws with a versioned copy of itself (the
    # sampling weights' step) and learns from every group whenever its outcome arrives, the groups dynamic
    # sampling drops included (reinforge.values.draw_versions, reinforge.values.pending_predictions).
    "prompt_value": ValueFeatureSpec(
        "prompt_value.enabled=true", "one prompt, one outcome per episode", only_envs=ONE_OUTCOME_ENVS,
        # Async: the producer featurizes its prompts with the weights that sample them, its own in-process engine's.
        async_in_process=True,
        refusals={"engine": "under trainer.schedule=async it reads the sampling weights' prompt states from the in-process "
                  "PyTorch engine: use engine.type=torch and workers.workers=0, or trainer.schedule=sync"},
    ),
    "curriculum": ValueFeatureSpec(
        "prompt_value.curriculum", "one prompt, one outcome per episode", only_envs=ONE_OUTCOME_ENVS,
    ),
    "success_head": ValueFeatureSpec(
        # Multi-turn: the head reads the final turn's response (the one the verifier checks); a game: each
        # seat's final turn with the seat's outcome; a gateway agent: each piece's final turn with the episode's.
        "success_head.enabled=true", "a trajectory's final turn and its outcome",
        # Async: the head reads the sampling policy's logits from the producer's own in-process engine.
        async_in_process=True,
        refusals={"engine": "under trainer.schedule=async it reads the sampling weights' logits from the in-process "
                  "PyTorch engine: use engine.type=torch and workers.workers=0, or trainer.schedule=sync"},
    ),
    "prune": ValueFeatureSpec(
        # On the in-process TorchEngine a single-turn call is pruned inside its decode loop; other engines (vLLM,
        # Ray workers), multi-turn episodes and partial rollouts are sampled in chunks checked between them
        # (reinforge.rollout.pruned_sampling), with the policy's logits from the in-process model of the same version.
        # A game or a gateway episode is pruned whole, inside the decode loop (reinforge.values.rollout_pruning: units).
        "success_head.prune=true", "one episode's turns in one trajectory, or a game or agent episode whole",
        decode_loop_envs=SPLIT_EPISODES,
        refusals={
            "decode_loop": "a game or a gateway agent samples its own moves and replies, and only our in-process PyTorch engine's "
            "decode loop lets it prune a whole game or episode (not built for chunked sampling): use engine.type=torch, "
            "workers.workers=0 and trainer.partial_rollouts=false, or success_head.prune=false",
        },
    ),
    "progress": ValueFeatureSpec(
        "progress.enabled=true", "a multi-turn episode's turns in one trajectory", refused_envs=("single_turn", *SPLIT_EPISODES),
    ),
}


def active_features(cfg: Config) -> list[str]:
    pv, s = cfg.prompt_value, cfg.success_head
    on = {
        "prompt_value": pv.enabled, "curriculum": pv.curriculum != "uniform", "success_head": s.enabled,
        "prune": s.enabled and s.prune, "progress": cfg.progress.enabled,
    }
    return [name for name, enabled in on.items() if enabled]


def check_value_capabilities(cfg: Config) -> None:
    """Each active value feature against its declaration; the first unsupported setting is refused."""
    t = cfg.trainer
    for name in active_features(cfg):
        spec = SPECS[name]
        what = spec.switch if "=" in spec.switch else f"{spec.switch}={cfg.prompt_value.curriculum}"
        env = cfg.env.type
        if env in spec.refused_envs or (spec.only_envs is not None and env not in spec.only_envs):
            serves = f"env.type in {spec.only_envs}" if spec.only_envs else f"env.type other than {spec.refused_envs}"
            raise ConfigError(f"{what} serves {serves} (it needs {spec.env_reason}); env.type={env} is not supported")
        if t.schedule == "async" and not spec.async_schedule:
            raise ConfigError(f"{what} with trainer.schedule=async: {spec.refusals['async']}")
        if t.partial_rollouts and not spec.partial:
            raise ConfigError(f"{what} with trainer.partial_rollouts=true: {spec.refusals['partial']}")
        if cfg.algo.dynamic_sampling and not spec.dynamic_sampling:
            raise ConfigError(f"{what} with algo.dynamic_sampling=true: {spec.refusals['dynamic_sampling']}")
        in_process = cfg.engine.type == "torch" and cfg.workers.workers == 0
        if env in spec.decode_loop_envs and (not in_process or t.partial_rollouts):
            raise ConfigError(f"{what} with env.type={env}: {spec.refusals['decode_loop']}")
        if spec.async_in_process and t.schedule == "async" and not in_process:
            where = f"engine.type={cfg.engine.type}" if cfg.engine.type != "torch" else f"workers.workers={cfg.workers.workers} (Ray rollout workers)"
            raise ConfigError(f"{what} with {where}: {spec.refusals['engine']}")
