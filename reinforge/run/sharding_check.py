"""workers.sharding=fsdp (reinforge.distributed.fsdp): the settings it needs, refused before anything is built."""

from __future__ import annotations

from reinforge.config import Config, ConfigError


def check_sharding(cfg: Config) -> None:
    """A clear error for a sharded learner the run cannot have (yet)."""
    w = cfg.workers
    if w.sharding == "none":
        for key, value, default in (("fsdp_precision", w.fsdp_precision, "auto"), ("fsdp_offload", w.fsdp_offload, False)):
            if value != default:  # refused rather than ignored: the user expects what it does
                raise ConfigError(f"workers.{key}={str(value).lower()} sets how FSDP shards the learner, but workers.sharding=none: set workers.sharding=fsdp or drop it")
        return
    if w.learners < 2:
        # Refused rather than ignored: one rank has nothing to shard over, and a user who asked for
        # sharding expects the memory it saves.
        raise ConfigError(
            f"workers.sharding={w.sharding} shards the learner over workers.learners ranks, but workers.learners={w.learners}: "
            "set workers.learners to 2 or more, or workers.sharding=none"
        )
    if cfg.algo.compile_forward:
        raise ConfigError("workers.sharding=fsdp with algo.compile_forward is not supported: set algo.compile_forward=false or workers.sharding=none")
    if w.fsdp_offload and not cfg.model.device.startswith("cuda"):
        # CPUOffloadPolicy moves the shards from GPU to host memory; a CPU model is there already
        # (and FSDP2's offload pins host memory, which needs a GPU: it would fail, not do nothing).
        raise ConfigError(
            f"workers.fsdp_offload=true keeps a GPU model's shards in host memory, but model.device={cfg.model.device} "
            "is the host already: set workers.fsdp_offload=false"
        )
