"""A pool target of a Pick: its ready workers, the saturation check on them, and the choice
among the free ones (or the note that the pool is saturated, for QoS to decide).

A mixin of `Router` (`kinference.routing.router`), which owns the state read here; the
choice itself is `WorkerChoice`'s.
"""

from __future__ import annotations

import numpy as np

from kinference.config import Target, target_api
from kinference.routing.apis import sent_shape
from kinference.routing.attempt import Attempt, Busy
from kinference.routing.decision import Decision
from kinference.routing.filters.ready import ReadyFilter
from kinference.routing.filters.saturation import free_positions
from kinference.routing.plugins.base import PickContext
from kinference.routing.reasons import Reason
from kinference.routing.table import IndexArray
from kinference.routing.worker_choice import WorkerChoice


class PoolTarget(WorkerChoice):
    """A pool target's try (the state it reads is `Router`'s)."""

    _ready: ReadyFilter

    def _try_pool(self, attempt: Attempt, group: tuple[Target, ...]) -> Decision | None:
        if sent_shape(attempt.query.request.shape, target_api(group[0], None)) is None:
            what = attempt.query.request.shape.value
            attempt.note(Reason.NO_TARGET, f"pool {pools_of(group)} takes no {what} requests")
            return None
        slots = self._ready_slots(attempt, group)
        if slots is None:
            return None
        signals, saturation = attempt.signals, self.policy.saturation
        # (no engine metrics anywhere: every ready worker is free)
        if not signals.known:
            return self._local(attempt, group, slots)
        decision, context = self._unless_saturated(attempt, group, slots)
        if decision is not None:
            return decision
        assert context is not None  # (made whenever no decision is)
        # Some are saturated; the request's own cache hit adds no KV use where it is cached.
        # The context made for that is the choice's too (`narrowed` to the free ones).
        levels = saturation.levels_with_hits_in(signals, slots, context[0])
        free = free_positions(levels)
        if free:
            kept, narrowed = self._narrowed(context, slots, free)
            return self._local(attempt, group, kept, narrowed, pool_slots=slots)
        attempt.note(Reason.SATURATED, f"pool {pools_of(group)} is saturated")
        attempt.busy.append(Busy(group, slots, np.asarray(levels, dtype=np.int8)))
        return None

    def _unless_saturated(
        self, attempt: Attempt, group: tuple[Target, ...], slots: IndexArray
    ) -> tuple[Decision | None, tuple[PickContext, str | None] | None]:
        """The choice among `slots` where none is saturated by the Pick's engine signals
        (and the context made for it, if one was); else None, and the Pick's context
        (`_context`) for the saturated path."""
        policy, saturation = self.policy, self.policy.saturation
        if policy.predicts_ttft and policy.pipeline.fuses(len(slots)):
            # A small pool: the saturation check (the request's own cache hits counted),
            # the scores and the choice in one C call. (The same answer as the check
            # below and then the choice: a level counting hits is never above the level
            # without them, and where one is, `levels_with_hits_in` decides as it does.)
            context = self._context(attempt, group, slots, lazy=True)  # (settled there)
            return self._local_unless(attempt, group, slots, context, saturation), context
        if not saturation.any_saturated_in(attempt.signals, slots):
            return self._local(attempt, group, slots), None
        return None, self._context(attempt, group, slots)

    def _ready_slots(self, attempt: Attempt, group: tuple[Target, ...]) -> IndexArray | None:
        """Ready workers of the group's pools (only the named pool, when one is named)."""
        named, catalog = attempt.query.pool, self.policy.catalog
        found = [
            slots
            for target in group
            if target.pool is not None and (named is None or target.pool == named)
            if (slots := catalog.slots(target.pool, target.model)) is not None
        ]
        if not found:
            where = f"the named pool {named}" if named else f"pool {pools_of(group)}"
            attempt.note(Reason.NO_TARGET, f"{where} does not serve {group[0].model!r}")
            return None
        slots = found[0] if len(found) == 1 else _union(found)
        slots = self._ready.filter_slots(self.table, slots)
        if not len(slots):
            what = f"pool {pools_of(group)} has no ready endpoint"
            attempt.note(Reason.NO_READY_ENDPOINT, what)
            return None
        return slots


def _union(found: list[IndexArray]) -> IndexArray:
    """Slots of several pools, sorted, each once. Not `np.unique`: its first call imports
    numpy.ma (11 ms idle, ~80 ms seen under load), on the loop, in the Pick that made it."""
    merged = np.sort(np.concatenate(found))
    return merged[np.concatenate(([True], merged[1:] != merged[:-1]))]


def pools_of(group: tuple[Target, ...]) -> str:
    """The group's pool names, for reasons."""
    return ", ".join(str(target.pool) for target in group)
