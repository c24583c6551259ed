"""Requests picked and not yet finished: the load each endpoint carries right now."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from kinference.routing.catalog import Candidate


@dataclass(slots=True)
class Assignment:
    """Where one picked request went, and until when it counts as load without news."""

    candidate: Candidate
    model: str
    picked_at: float  # monotonic seconds
    deadline: float  # monotonic seconds
    first_token_at: float | None = None


class InFlight:
    """Per-endpoint counts of requests between Pick and their final report, Abort or TTL."""

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self._clock = clock
        self._assignments: dict[int, Assignment] = {}
        self._per_endpoint: Counter[str] = Counter()

    def __contains__(self, response_id: object) -> bool:
        return response_id in self._assignments

    def __len__(self) -> int:
        return len(self._assignments)

    def load(self, endpoint: str) -> int:
        return self._per_endpoint[endpoint]

    def per_endpoint(self) -> dict[str, int]:
        return {endpoint: n for endpoint, n in self._per_endpoint.items() if n}

    def get(self, response_id: int) -> Assignment | None:
        return self._assignments.get(response_id)

    def add(self, response_id: int, candidate: Candidate, model: str) -> Assignment:
        now = self._clock()
        assignment = Assignment(candidate, model, now, now + self.ttl_s)
        self._assignments[response_id] = assignment
        self._per_endpoint[candidate.endpoint] += 1
        return assignment

    def release(self, response_id: int) -> Assignment | None:
        """Stop counting a request; None if it was not in flight (already released)."""
        assignment = self._assignments.pop(response_id, None)
        if assignment is not None:
            endpoint = assignment.candidate.endpoint
            self._per_endpoint[endpoint] -= 1
            if self._per_endpoint[endpoint] <= 0:
                del self._per_endpoint[endpoint]
        return assignment

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
        return expired
