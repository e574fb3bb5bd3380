"""Checkpoints of a sharded learner (workers.sharding=fsdp) through `torch.distributed.checkpoint` (DCP).

Every rank writes its own shards of each policy's weights and AdamW moments into the checkpoint's
`sharded/` directory (DCP's `.metadata` and one `__<rank>_0.distcp` file per rank), all ranks at
once: no rank ever holds the whole optimizer state. Where a plain run's state.pt holds the
optimizer's state_dict, a sharded run's holds `sharded_entry`: the directory (relative to the
checkpoint, made absolute when state.pt is loaded: runtime/checkpoint.py), the policy's key in it
and how many ranks wrote it. The checkpoint's manifest covers the shard files like any other, so a
missing or damaged shard is found, and named, before anything is loaded.

Loading reshards: DCP reads, for each rank's shards (or a plain model's full tensors), the slices
it needs from the saved ones, so a run saved by N ranks resumes on M ranks, or on full replicas
(workers.sharding=none), and says so in one line. At the same world size every rank reads back
exactly the bytes it wrote: the resumed run is the uninterrupted one, bit for bit.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from reinforge.runtime.checkpoint import PART
from reinforge.runtime.resume_changes import configured_hyperparameters
from reinforge.runtime.run_errors import CheckpointError

SHARDED_DIR = "sharded"  # inside a checkpoint directory


def sharded_entry(name: str, world_size: int) -> dict:
    """What state.pt keeps in place of a sharded learner's optimizer state."""
    return {PART: SHARDED_DIR, "key": name, "world_size": world_size}


def _state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """The model's and optimizer's state as DCP reads and writes it: parameters by name, each a
    DTensor shard of this rank on a sharded model, a full tensor on a plain one."""
    model_state, optimizer_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optimizer": optimizer_state}


def save_shards(parts: dict[str, tuple[torch.nn.Module, torch.optim.Optimizer]], directory: Path) -> None:
    """Write each policy's sharded model and optimizer (name -> (model, optimizer)) into `directory`:
    a collective, every rank of the group calls it with its own shards."""
    try:
        dcp.save({name: _state(model, optimizer) for name, (model, optimizer) in parts.items()}, checkpoint_id=directory)
    except CheckpointException as err:  # a BaseException: its first rank's error (a full disk: an OSError) goes on
        raise _first_failure(err) from None


def load_shards(model: torch.nn.Module, optimizer: torch.optim.Optimizer, entry: dict, alone: bool = False) -> None:
    """Load the policy `entry` names into `model` and `optimizer`, resharded to however they are
    split now. A collective over the group unless `alone` (a plain model in one process). The
    optimizer keeps the hyperparameters it was built with (the config's, as load_optimizer_state)."""
    directory = Path(entry[PART])
    state = {entry["key"]: _state(model, optimizer)}
    try:
        with warnings.catch_warnings():  # alone: DCP warns that it assumes one process, which is meant
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.load(state, checkpoint_id=directory, no_dist=alone)
    except (Exception, CheckpointException) as err:  # noqa: BLE001 - the checkpoint's manifest, verified before, names a
        # damaged file; this is what is left (files changed since): DCP's first failure, in one line
        failure = _first_failure(err)
        lines = str(failure).strip().splitlines()
        raise CheckpointError(
            f"cannot read the sharded learner state in {directory}: {type(failure).__name__}" + (f": {lines[0][:300]}" if lines else "")
        ) from None
    with configured_hyperparameters(optimizer):
        set_state_dict(model, optimizer, model_state_dict=state[entry["key"]]["model"], optim_state_dict=state[entry["key"]]["optimizer"])


def _first_failure(err: BaseException) -> BaseException:
    """The error behind DCP's CheckpointException (which holds each failed rank's error and trace)."""
    if isinstance(err, CheckpointException) and err.failures:
        return next(iter(err.failures.values()))[0]
    return err


def resharding_note(entry: dict, world_size: int, sharded: bool) -> str | None:
    """The line a resume prints when the learner state was saved by another number of ranks."""
    saved = entry["world_size"]
    if sharded and saved == world_size:
        return None
    if sharded:
        onto = f"{world_size} ranks"
    elif world_size > 1:
        onto = f"a full copy on each of {world_size} ranks (workers.sharding=none)"
    else:
        onto = "one process (workers.sharding=none)"
    return f"resharding the learner state in {entry[PART]} from {saved} FSDP ranks to {onto}"


def load_learner_shards(learner, entry: dict) -> None:
    """A resumed policy's learner state from a sharded checkpoint, on rank 0 (the loop's process).
    A sharded learner group loads it on every rank (`load_shards` of ShardedDriverLearner); any
    other learner reads the full tensors alone, and a data-parallel group's followers take them
    from rank 0 with its first update (reinforge.distributed.learner_group)."""
    group_load = getattr(learner, "load_shards", None)
    note = resharding_note(entry, getattr(learner, "world_size", 1), sharded=group_load is not None)
    if note is not None:
        print(f"reinforge: {note}", flush=True)
    if group_load is not None:
        group_load(entry)
    else:
        load_shards(learner.model, learner.optimizer, entry, alone=True)
