"""Applies the other replicas' events to this instance's routing state.

Load is a PN-counter: each replica's contribution to each worker is kept apart, so when a
replica dies (heartbeat gone) or must be re-read (a gap in its sequence numbers) its part is
taken out or replaced exactly, without touching anyone else's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from kinference.cluster import codec
from kinference.routing import PrefixIndex, WorkerTable

log = logging.getLogger(__name__)

ITL_BUCKETS = 15  # layout 1


class ClusterView:
    """The other replicas' load per worker, and the folding of their events into ours."""

    def __init__(
        self,
        table: WorkerTable,
        prefix: PrefixIndex,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.table = table
        self.prefix = prefix
        # Told when another replica blacklisted a provider (set by the composition root).
        self.on_cooled: Callable[[str], None] = lambda provider: None
        self._clock = clock
        self._wall = wall
        self.load: dict[str, dict[int, int]] = {}  # instance -> slot -> requests in flight
        self.seq: dict[str, int] = {}  # instance -> last flush sequence number accounted for
        self.applied: dict[str, int] = {}  # event kind -> events applied (for metrics)
        self.last_seen: dict[str, float] = {}  # instance -> monotonic s of its last entry

    def instances(self) -> set[str]:
        return set(self.seq)

    def needs_resync(self, entry: codec.Entry) -> bool:
        """Whether entries of this instance were missed before `entry`."""
        return entry.seq > self.seq.get(entry.instance, 0) + 1

    def apply(self, entry: codec.Entry) -> None:
        """Fold one entry in; its load deltas only if they are not in a snapshot already."""
        self.last_seen[entry.instance] = self._clock()
        if entry.load is not None:  # a snapshot flush: its load replaces the instance's
            self.replace(
                entry.instance, entry.load, max(entry.seq, self.seq.get(entry.instance, 0))
            )
            with_load = False
        else:
            with_load = entry.seq > self.seq.get(entry.instance, 0)
        if with_load:
            self.seq[entry.instance] = entry.seq
        for event in entry.events:
            try:
                self._apply_event(entry.instance, event, with_load=with_load)
            except (IndexError, KeyError, TypeError, ValueError):
                log.warning("skipping a malformed %r event from %s", event[:1], entry.instance)

    def replay_prefixes(self, entry: codec.Entry) -> None:
        """Warm the prefix index from an old entry (nothing else of it is replayed)."""
        for event in entry.events:
            if event and event[0] == codec.PICKED and len(event) == 4:
                self.prefix.record(self.table.slot(str(event[1])), codec.unpack_hashes(event[3]))

    def _apply_event(self, instance: str, event: list[Any], *, with_load: bool) -> None:
        kind = event[0]
        self.applied[kind] = self.applied.get(kind, 0) + 1
        if kind == codec.PICKED:
            slot = self.table.slot(event[1])
            if with_load:
                self._add(instance, slot, 1)
            self.prefix.record(slot, codec.unpack_hashes(event[3]))
        elif kind == codec.RELEASED:
            if with_load:
                self._add(instance, self.table.slot(event[1]), -1)
        elif kind == codec.FIRST_TOKEN:
            self.table.observe_ttft(self.table.slot(event[1]), str(event[2]), float(event[3]))
        elif kind == codec.ITL and len(event[3]) == ITL_BUCKETS:
            counts = tuple(int(count) for count in event[3])
            self.table.observe_itl(self.table.slot(event[1]), str(event[2]), counts)
        elif kind == codec.ENGINE:
            self.engine_reading(str(event[1]), event[2])
        elif kind == codec.COOLED:
            self.on_cooled(str(event[1]))

    def _add(self, instance: str, slot: int, delta: int) -> None:
        counts = self.load.setdefault(instance, {})
        current = counts.get(slot, 0)
        new = max(current + delta, 0)  # a release of a pick we never saw changes nothing
        self.table.inflight[slot] += new - current
        if new:
            counts[slot] = new
        else:
            counts.pop(slot, None)

    def replace(self, instance: str, counts: Mapping[str, int], seq: int) -> None:
        """Take an instance's load from its snapshot (its load hash at flush `seq`).

        Only its load is replaced: when it was last seen publishing is kept, since after an
        empty Redis restart its heartbeat may be missing for a while and the membership
        check must not drop the load just taken."""
        self._unload(instance)
        for endpoint, count in counts.items():
            if count > 0:
                self._add(instance, self.table.slot(endpoint), count)
        self.seq[instance] = seq

    def drop(self, instance: str) -> None:
        """Forget an instance: its load vanishes from every worker."""
        self._unload(instance)
        self.seq.pop(instance, None)
        self.last_seen.pop(instance, None)

    def _unload(self, instance: str) -> None:
        for slot, count in self.load.pop(instance, {}).items():
            self.table.inflight[slot] = max(self.table.inflight[slot] - count, 0)

    def seen_within(self, instance: str, seconds: float) -> bool:
        """Whether the instance published an entry in the last `seconds`."""
        seen = self.last_seen.get(instance)
        return seen is not None and self._clock() - seen <= seconds

    def engine_reading(self, endpoint: str, reading: Mapping[str, Any]) -> None:
        """A scrape leader's reading; its age is carried over onto our monotonic clock."""
        slot = self.table.slot(endpoint)
        self.table.ready[slot] = bool(reading.get("ready", True))
        age_s = max(self._wall() - float(reading["at"]), 0.0)
        if not reading.get("read", False):  # the leader's scrape failed: unknown
            self.table.set_engine(slot, waiting=None, running=None, kv_usage=None)
            return
        self.table.set_engine(
            slot,
            waiting=_optional(reading.get("waiting")),
            running=_optional(reading.get("running")),
            kv_usage=_optional(reading.get("kv_usage")),
            adapters=frozenset(reading.get("adapters", ())),
            scraped_at=self._clock() - age_s,
        )


def _optional(value: Any) -> float | None:
    return None if value is None else float(value)
