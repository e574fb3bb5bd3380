"""Leave the default process group and let its sockets close, FSDP2 or not.

`dist.destroy_process_group()` drops torch.distributed's own references to the groups, but a
process that ran FSDP2 (DTensor) keeps them alive elsewhere: DTensor's sharding-propagation caches
(a per-thread `lru_cache` in Python and a fast-path cache in C++) keep the `OpSchema`s and
`OutputSharding`s of every op they dispatched, those hold `DTensorSpec`s, each spec its
`DeviceMesh`, and a mesh holds its `ProcessGroup` objects (`DeviceMesh._pg_registry`). A live
group keeps its store and its gloo device, so rank 0 keeps the TCPStore's server listening on '::'
(all interfaces, the rendezvous port) and gloo's listener on the loopback address, until the
process exits. Found by listing the process's listening sockets (/proc/self/net/tcp{,6} matched
with /proc/self/fd) and walking `gc.get_referrers` up from the surviving `DeviceMesh`
(tests/distributed/test_process_group_teardown.py). Clearing the caches after the group is
destroyed frees the last references and the sockets close.

The caches are per thread: this clears the calling thread's, where the CPU learner's forward,
backward and step run. On a GPU the backward runs in autograd's device threads, whose caches may
still hold a mesh; that only matters to a process that lives on after its group (a test), not to a
run, which exits.
"""

from __future__ import annotations

import functools
import gc
import sys

import torch.distributed as dist

DTENSOR = "torch.distributed.tensor"


def clear_dtensor_caches() -> None:
    """Empty DTensor's caches, which keep device meshes and so their process groups alive: the
    sharding-propagation caches (Python, every thread's, and the C++ fast path's) and the other
    `functools.lru_cache`s of torch.distributed.tensor (mesh topology, redistribution plans). Only
    their contents go: they refill on the next op. Which caches exist differs between torch
    versions, hence the scan rather than a list of names."""
    try:
        from torch.distributed.tensor.debug import _clear_sharding_prop_cache

        _clear_sharding_prop_cache()  # this thread's Python cache and the C++ one
    except ImportError:  # an older torch: the scan below finds its Python cache
        pass
    for obj in gc.get_objects():
        if type(obj) is functools._lru_cache_wrapper and str(getattr(obj, "__module__", "")).startswith(DTENSOR):
            obj.cache_clear()
    redistribute = sys.modules.get(DTENSOR + "._redistribute")
    planners = getattr(redistribute, "_planner_cache", None)  # a plain dict of planners, each with its mesh
    if isinstance(planners, dict):
        planners.clear()


def leave_process_group() -> None:
    """`dist.destroy_process_group()` (when a group exists), then free what still holds the groups."""
    if dist.is_initialized():
        dist.destroy_process_group()
    clear_dtensor_caches()
    gc.collect()  # the meshes and groups sit in reference cycles
