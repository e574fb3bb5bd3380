"""Rollout pruning inside the gateway: a flush's rows placed in their task groups, pruned episodes ended.

The env (reinforge.gateway.env) sets a `SessionPruning` on the batcher for one rollout: each session
(one agent episode) belongs to its task's group. Every engine call of a flush gets the hook of that
call (reinforge.engines.decode_hook.RowGroups: a row's unit is its session, so pruning stops an
episode whole); the group's other sessions not pruned count in it with no prediction
(reinforge.values.rollout_pruning). A session with a pruned row is pruned: its agent gets the
reply cut where it stopped (finish reason "length"), the session is finished so the agent's next
call is refused and the batcher no longer waits for it, and the env gives every piece of the
episode finish reason "pruned": the episode leaves the loss, not scored.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from reinforge.engines.base import Generation
from reinforge.engines.decode_hook import DecodeHook, GroupedDecodeHook, RowGroups

PRUNED = "pruned"


class SessionPruning:
    def __init__(self, hook: GroupedDecodeHook, groups: dict[str, int], finish: Callable[[str], None]):
        self.hook, self.groups, self.finish = hook, dict(groups), finish  # session key -> group id; finish(key)
        self.pruned: set[str] = set()
        self._lock = threading.Lock()

    def hook_for(self, keys: list[str | None]) -> DecodeHook | None:
        """The hook of one engine call whose rows belong to these sessions (None: a row outside the
        rollout, such as a plain request, which no group holds: the call is not pruned)."""
        if any(key not in self.groups for key in keys):
            return None
        with self._lock:
            pruned = set(self.pruned)
        in_call = set(keys)
        elsewhere: dict[int, int] = {}
        for key, group in self.groups.items():
            if key not in in_call and key not in pruned:
                elsewhere[group] = elsewhere.get(group, 0) + 1
        return self.hook.for_rows(RowGroups([self.groups[key] for key in keys], list(keys), elsewhere))

    def observe(self, keys: list[str | None], generations: list[Generation]) -> None:
        """After the call: the sessions a row of which was pruned are pruned, and finished."""
        stopped = {key for key, g in zip(keys, generations) if g.finish_reason == PRUNED}
        with self._lock:
            stopped -= self.pruned
            self.pruned |= stopped
        for key in sorted(stopped):
            self.finish(key)

    def is_pruned(self, key: str) -> bool:
        with self._lock:
            return key in self.pruned
