"""The body of a reward worker process (started by `reinforge.rewards.process_pool`).

It is a fresh interpreter (never a fork of the trainer, whose torch/OpenMP threads a fork would
inherit in a broken state). Protocol over two pipes, each message a pickle:

    parent -> worker   {"sys_path": [...], "components": {name: spec}}   once
    worker -> parent   ("ready", pid) | ("failed", traceback, component, error)
    parent -> worker   [(call_id, pickled RewardCall), ...]              a chunk, run in order
    worker -> parent   ("result", call_id, True, value) | ("result", call_id, False, (type, message, traceback))
                                                                         one per call, as each ends

A spec is ("named", fn, params) (built by name, the usual case) or ("pickled", bytes) (a picklable
reward object handed to the scorer from Python). The parent times each call from the previous
result, so it can kill this process in the middle of a chunk and resend the calls it did not reach.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import traceback
from multiprocessing.connection import Connection


def die_with_parent() -> None:
    """Linux: the kernel kills this process when the trainer's thread that started it exits, so a
    crashed trainer leaves no worker behind (a hung worker could not notice by itself)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the parent's atexit hook still kills workers
        pass


class ComponentBuildError(Exception):
    """A component that cannot be built here; says which, and why."""

    def __init__(self, component: str, error: str):
        super().__init__(f"{component}: {error}")
        self.component, self.error = component, error


def build_components(specs: dict) -> dict:
    from reinforge.rewards.builtin import build_component

    fns = {}
    for name, spec in specs.items():
        try:
            if spec[0] == "named":
                fns[name], _ = build_component(spec[1], spec[2])
            else:
                fns[name] = pickle.loads(spec[1])
        except Exception as err:  # noqa: BLE001 - any error building a reward: the parent reports it
            # An ImportPathError already says what failed and where; other errors need their type.
            error = str(err) if isinstance(err, ValueError) else f"{type(err).__name__}: {err}"
            raise ComponentBuildError(name, error) from err
    return fns


def serve(reader: Connection, writer: Connection) -> None:
    setup = pickle.loads(reader.recv_bytes())
    sys.path[:] = setup["sys_path"]
    try:
        fns = build_components(setup["components"])
    except BaseException as err:  # noqa: BLE001 - reported to the parent, which says which worker failed to start
        component, error = (err.component, err.error) if isinstance(err, ComponentBuildError) else ("", f"{type(err).__name__}: {err}")
        writer.send_bytes(pickle.dumps(("failed", traceback.format_exc(), component, error)))
        return
    from reinforge.rewards.reward_calls import execute

    writer.send_bytes(pickle.dumps(("ready", os.getpid())))
    while True:
        try:
            chunk = pickle.loads(reader.recv_bytes())
        except EOFError:  # the parent closed the pool
            return
        for call_id, payload in chunk:
            try:
                call = pickle.loads(payload)  # one by one, as the parent pickled them
                message = pickle.dumps(("result", call_id, True, execute(fns, call)))
            except BaseException as err:  # noqa: BLE001 - any failure is the call's result
                detail = (type(err).__name__, str(err), traceback.format_exc())
                message = pickle.dumps(("result", call_id, False, detail))
            writer.send_bytes(message)


def main() -> None:
    die_with_parent()
    read_fd, write_fd, parent_pid = (int(a) for a in sys.argv[1:4])
    if os.getppid() != parent_pid:  # the parent died before the death signal was armed
        return
    serve(Connection(read_fd, writable=False), Connection(write_fd, readable=False))


if __name__ == "__main__":
    main()
