"""workers.sharding=fsdp (reinforge.distributed.fsdp): the settings it needs, refused before anything is built."""

from __future__ import annotations

from reinforge.config import Config, ConfigError


def check_sharding(cfg: Config) -> None:
    """A clear error for a sharded learner the run cannot have (yet)."""
    w = cfg.workers
    if w.sharding == "none":
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
