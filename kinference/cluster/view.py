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
from kinference.itl_layout import BUCKETS as ITL_BUCKETS
from kinference.routing.features import EngineReading
from kinference.routing.pending import PendingPrefix
from kinference.routing.router import Router
from kinference.routing.table import WorkerTable
from kinference.workers.snapshot import bounded_count, bounded_fraction

log = logging.getLogger(__name__)


class ClusterView:
    """The other replicas' load per worker, and the folding of their events into ours."""

    def __init__(
        self,
        router: Router,
        *,
        on_cooled: Callable[[str], None] = lambda provider: None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.router = router
        self.on_cooled = on_cooled  # told when another replica blacklisted a provider
        self._clock = clock
        self._wall = wall
        self.load: dict[str, dict[str, int]] = {}  # instance -> endpoint -> requests in flight
        self.seq: dict[str, int] = {}  # instance -> last flush sequence number accounted for
        self.applied: dict[str, int] = {}  # event kind -> events applied (for metrics)
        self.last_seen: dict[str, float] = {}  # instance -> monotonic s of its last entry
        # instance -> (endpoint, hashes) of its last pick applied: its PREFILLING follows
        self._last_pick: dict[str, tuple[str, tuple[int, ...]]] = {}

    @property
    def table(self) -> WorkerTable:
        """The router's worker table (read it; change it through the router)."""
        return self.router.table

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
            except (IndexError, KeyError, TypeError, ValueError, OverflowError):
                log.warning("skipping a malformed %r event from %s", event[:1], entry.instance)

    def replay_prefixes(self, entry: codec.Entry) -> None:
        """Warm the prefix index from an old entry (nothing else of it is replayed)."""
        for event in entry.events:
            if event and event[0] == codec.PICKED and len(event) == 4:
                self.router.remote_picked(str(event[1]), codec.unpack_hashes(event[3]))

    def _apply_event(self, instance: str, event: list[Any], *, with_load: bool) -> None:
        kind = event[0]
        self.applied[kind] = self.applied.get(kind, 0) + 1
        if kind == codec.PICKED:
            self._picked(instance, event, with_load=with_load)
        elif kind in _PREFIX_EVENTS:
            self._apply_prefix_event(instance, event)
        elif kind == codec.RELEASED:
            if with_load:
                self._add(instance, str(event[1]), -1)
        elif kind in _SAMPLE_EVENTS:
            self._apply_sample(event)
        elif kind == codec.ENGINE:
            self.engine_reading(str(event[1]), event[2])
        elif kind == codec.COOLED:
            self.on_cooled(str(event[1]))

    def _apply_sample(self, event: list[Any]) -> None:
        """Another replica's latency or size sample of an endpoint and model."""
        kind, endpoint, model, router = event[0], str(event[1]), str(event[2]), self.router
        if kind == codec.FIRST_TOKEN:
            router.remote_first_token(endpoint, model, float(event[3]))
        elif kind == codec.ITL and len(event[3]) == ITL_BUCKETS:
            router.remote_itl(endpoint, model, tuple(int(count) for count in event[3]))
        elif kind == codec.SERVED:
            router.remote_served(endpoint, model, float(event[3]),
                                 _measured(event[4]), _measured(event[5]))  # fmt: skip
        elif kind == codec.TEXT_SIZE:
            router.remote_text(endpoint, model, float(event[3]), float(event[4]))
        elif kind == codec.BUSY:
            router.remote_busy(endpoint, model, float(event[3]), float(event[4]))

    def _picked(self, instance: str, event: list[Any], *, with_load: bool) -> None:
        endpoint, hashes = str(event[1]), codec.unpack_hashes(event[3])
        if with_load:
            self._add(instance, endpoint, 1)
        self._last_pick[instance] = (endpoint, hashes)
        self.router.remote_picked(endpoint, hashes)

    def _apply_prefix_event(self, instance: str, event: list[Any]) -> None:
        """Another replica's prefill in progress, or what it learned of an engine's cache."""
        kind, endpoint, router = event[0], str(event[1]), self.router
        if kind == codec.PREFILLING:
            last = self._last_pick.pop(instance, None)
            hashes = last[1] if last is not None and last[0] == endpoint else ()
            start, tokens, block_tokens = int(event[3]), float(event[4]), float(event[5])
            if min(start, tokens, block_tokens) < 0:
                raise ValueError("a negative prefill")
            entry = PendingPrefix(hashes, start, tokens, block_tokens)
            router.remote_prefilling(instance, endpoint, int(event[2]), entry)
        elif kind == codec.PREFILLED:
            router.remote_prefilled(instance, endpoint, int(event[2]))
        elif kind == codec.SHORTFALL:
            age = None if event[4] is None else int(event[4])
            router.remote_shortfall(endpoint, codec.unpack_hashes(event[2]), int(event[3]), age)
        elif kind == codec.CONFIRMED:
            router.remote_confirmed(endpoint, None if event[2] is None else int(event[2]))

    def _add(self, instance: str, endpoint: str, delta: int) -> None:
        counts = self.load.setdefault(instance, {})
        current = counts.get(endpoint, 0)
        new = max(current + delta, 0)  # a release of a pick we never saw changes nothing
        if new != current:
            self.router.remote_load(endpoint, new - current)
        if new:
            counts[endpoint] = new
        else:
            counts.pop(endpoint, None)

    def replace(self, instance: str, counts: Mapping[str, int], seq: int) -> None:
        """Take an instance's load from its snapshot (its load hash at flush `seq`).

        Only its load is replaced: when it was last seen publishing is kept, since after an
        empty Redis restart its heartbeat may be missing for a while and the membership
        check must not drop the load just taken."""
        self._unload(instance)
        for endpoint, count in counts.items():
            if count > 0:
                self._add(instance, endpoint, count)
        self.seq[instance] = seq

    def drop(self, instance: str) -> None:
        """Forget an instance: its load and prefills in progress vanish from every worker."""
        self._unload(instance)
        self._last_pick.pop(instance, None)
        self.router.remote_gone(instance)
        self.seq.pop(instance, None)
        self.last_seen.pop(instance, None)

    def _unload(self, instance: str) -> None:
        for endpoint, count in self.load.pop(instance, {}).items():
            self.router.remote_load(endpoint, -count)

    def seen_within(self, instance: str, seconds: float) -> bool:
        """Whether the instance published an entry in the last `seconds`."""
        seen = self.last_seen.get(instance)
        return seen is not None and self._clock() - seen <= seconds

    def engine_reading(self, endpoint: str, reading: Mapping[str, Any]) -> None:
        """A scrape leader's reading; its age is carried over onto our monotonic clock, its
        numbers held to what a scrape accepts (the reading may come from anywhere)."""
        ready = bool(reading.get("ready", True))
        age_s = max(self._wall() - float(reading["at"]), 0.0)
        if not reading.get("read", False):  # the leader's scrape failed: unknown
            self.router.engine_reading(endpoint, ready, None)
            return
        engine = EngineReading(
            waiting=_count(reading.get("waiting")),
            running=_count(reading.get("running")),
            kv_usage=_fraction(reading.get("kv_usage")),
            adapters=frozenset(reading.get("adapters", ())),
            scraped_at=self._clock() - age_s,
            kv_capacity_tokens=_optional(reading.get("kv_capacity_tokens")),
        )
        self.router.engine_reading(endpoint, ready, engine)


_PREFIX_EVENTS = frozenset({codec.PREFILLING, codec.PREFILLED, codec.SHORTFALL, codec.CONFIRMED})
_SAMPLE_EVENTS = frozenset(
    {codec.FIRST_TOKEN, codec.ITL, codec.SERVED, codec.TEXT_SIZE, codec.BUSY}
)


def _optional(value: Any) -> float | None:
    return None if value is None else float(value)


def _count(value: Any) -> float | None:
    """A reading's count as a scrape bounds it (None: unknown, or no finite number)."""
    return None if value is None else bounded_count((float(value),))


def _fraction(value: Any) -> float | None:
    return None if value is None else bounded_fraction((float(value),))


def _measured(value: Any) -> float:
    """A sample that may be null (not measured) as a float, NaN for null."""
    return float("nan") if value is None else float(value)
