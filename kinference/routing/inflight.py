"""Requests picked and not yet finished: the load each worker carries right now."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from kinference.routing.decision import LocalChoice, ProviderChoice
from kinference.routing.journal import Journal, NullJournal
from kinference.routing.table import WorkerTable

Destination = LocalChoice | ProviderChoice

RECENT_LIMIT = 100_000  # released provider requests remembered for late Aborts (bounded)


@dataclass(slots=True)
class Assignment:
    """Where one picked request went, for whom, and until when it counts as load."""

    destination: Destination
    tenant: str
    picked_at: float  # monotonic seconds
    deadline: float  # monotonic seconds
    first_token_at: float | None = None
    ttft_ms: float | None = None  # as reported at ReportFirstToken
    client_request_id: str = ""  # the caller's id, for log lines about this request

    @property
    def local(self) -> LocalChoice | None:
        return self.destination if isinstance(self.destination, LocalChoice) else None


class InFlight:
    """Requests between Pick and their final report, Abort or TTL, counted per worker in
    the worker table; released provider requests are remembered a while so a late Abort
    still tells which provider failed. Released local requests are forgotten at once: a
    late Abort teaches nothing about an engine, and at thousands of requests a minute
    remembering them was the server's only memory growth under steady load.

    The table's `inflight` array is the cluster-wide load (the cluster layer adds the other
    replicas' requests to it); `own` counts this instance's picks, which it publishes.
    """

    def __init__(
        self,
        table: WorkerTable,
        ttl_s: float,
        *,
        recent_ttl_s: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
        journal: Journal | None = None,
        released: Callable[[LocalChoice], None] | None = None,
    ) -> None:
        self.table = table
        self._released = released  # told of every local request that stops counting
        self.journal: Journal = NullJournal() if journal is None else journal
        self.own: dict[str, int] = {}  # endpoint -> this instance's requests in flight
        self.ttl_s = ttl_s
        self.recent_ttl_s = recent_ttl_s
        self._clock = clock
        self._assignments: dict[int, Assignment] = {}
        self._recent: OrderedDict[int, tuple[float, ProviderChoice]] = OrderedDict()

    def __contains__(self, response_id: object) -> bool:
        return response_id in self._assignments

    def __len__(self) -> int:
        return len(self._assignments)

    def load(self, endpoint: str) -> int:
        """Requests in flight on one endpoint (cluster-wide, as scored)."""
        return int(self.table.inflight[self.table.slot(endpoint)])

    def per_endpoint(self) -> dict[str, int]:
        """Cluster-wide requests in flight per endpoint (only endpoints with some)."""
        table = self.table
        return {
            table.endpoints[slot]: int(table.inflight[slot])
            for slot in range(len(table))
            if table.inflight[slot]
        }

    def get(self, response_id: int) -> Assignment | None:
        return self._assignments.get(response_id)

    def add(
        self,
        response_id: int,
        destination: Destination,
        tenant: str,
        hashes: tuple[int, ...] = (),
        client_request_id: str = "",
    ) -> Assignment:
        """Count a picked request; `hashes` are its prompt's prefix blocks (for the journal)."""
        now = self._clock()
        assignment = Assignment(
            destination, tenant, now, now + self.ttl_s, client_request_id=client_request_id
        )
        self._assignments[response_id] = assignment
        if isinstance(destination, LocalChoice):
            self.table.add_inflight(destination.slot, 1)
            endpoint = destination.endpoint
            self.own[endpoint] = self.own.get(endpoint, 0) + 1
            self.journal.picked(endpoint, destination.model, hashes)
        return assignment

    def age_s(self, assignment: Assignment) -> float:
        """Seconds since `assignment` was picked, on the clock its TTL runs by."""
        return self._clock() - assignment.picked_at

    def release(self, response_id: int) -> Assignment | None:
        """Stop counting a request; None if it was not in flight (already released)."""
        assignment = self._assignments.pop(response_id, None)
        if assignment is None:
            return None
        local = assignment.local
        if local is not None:
            self.table.add_inflight(local.slot, -1)
            no_token = assignment.first_token_at is None  # its prefill is no longer pending
            if no_token:  # nor is it the pool's probe any more (`Learning.picked`)
                self.table.end_probe(id(local))
                if self.table.end_prefill(local.slot, id(local)):
                    self.journal.prefilled(local.endpoint, id(local))
            left = self.own.get(local.endpoint, 0) - 1
            if left > 0:
                self.own[local.endpoint] = left
            else:
                self.own.pop(local.endpoint, None)
            self.journal.released(local.endpoint)
            if self._released is not None:
                self._released(local)
        self._remember(response_id, assignment.destination)
        return assignment

    def recent(self, response_id: int) -> Destination | None:
        """Where a request went: in flight, or a provider released within `recent_ttl_s`."""
        assignment = self._assignments.get(response_id)
        if assignment is not None:
            return assignment.destination
        remembered = self._recent.get(response_id)
        return None if remembered is None else remembered[1]

    def _remember(self, response_id: int, destination: Destination) -> None:
        if not isinstance(destination, ProviderChoice):
            return
        self._recent[response_id] = (self._clock() + self.recent_ttl_s, destination)
        if len(self._recent) > RECENT_LIMIT:
            self._recent.popitem(last=False)

    def expire(self) -> list[int]:
        """Release every request that outlived the TTL; returns their response ids."""
        now = self._clock()
        expired = []
        for response_id, assignment in self._assignments.items():
            if assignment.deadline > now:
                break  # one TTL for all: insertion order is deadline order
            expired.append(response_id)
        for response_id in expired:
            self.release(response_id)
        while self._recent and next(iter(self._recent.values()))[0] <= now:
            self._recent.popitem(last=False)
        return expired
