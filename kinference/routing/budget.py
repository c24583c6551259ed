"""Token budgets per tenant: the accounting TenantGate delegates to.

`LocalBudget` counts this process's usage only (a standalone picker). A replica in a cluster
uses `kinference.cluster.leases.LeasedBudget`, which enforces one budget across replicas.
Every method here runs on the Pick path: none may wait on anything.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

WINDOW_S = 60.0  # tokens_per_minute is measured over a sliding 60-second window
_BUCKET_S = 1.0  # usage is kept per second, so the window slides in 1-second steps


class Budget(Protocol):
    """Tokens per minute per tenant; `limit` comes with each call, from the policy in force."""

    def exhausted(self, tenant: str, limit: int) -> str | None:
        """Why no more requests of `tenant` may be admitted now (completing "tenant X ..."),
        or None to admit one. Called only for tenants with a budget."""

    def used(self, tenant: str) -> int:
        """Tokens `tenant` used in the last minute, as far as this instance knows."""

    def record(self, tenant: str, limit: int, tokens: int) -> None:
        """Count `tokens` (> 0) reported for a request of `tenant`."""


class TokenWindow:
    """Tokens one tenant used in the last minute, in 1-second buckets."""

    def __init__(self) -> None:
        self._buckets: deque[tuple[int, int]] = deque()  # (second, tokens)
        self.total = 0

    def add(self, now: float, tokens: int) -> None:
        second = int(now // _BUCKET_S)
        if self._buckets and self._buckets[-1][0] == second:
            _, earlier = self._buckets.pop()
            self._buckets.append((second, earlier + tokens))
        else:
            self._buckets.append((second, tokens))
        self.total += tokens

    def used(self, now: float) -> int:
        oldest = int((now - WINDOW_S) // _BUCKET_S)
        while self._buckets and self._buckets[0][0] <= oldest:
            self.total -= self._buckets.popleft()[1]
        return self.total


class LocalBudget:
    """This process's usage in a sliding minute: exact, and blind to other replicas."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._usage: dict[str, TokenWindow] = {}

    def exhausted(self, tenant: str, limit: int) -> str | None:
        used = self.used(tenant)
        if used < limit:
            return None
        return f"used its budget: {used} of {limit} tokens in the last minute"

    def used(self, tenant: str) -> int:
        window = self._usage.get(tenant)
        return 0 if window is None else window.used(self._clock())

    def record(self, tenant: str, limit: int, tokens: int) -> None:
        del limit  # usage is counted whatever the limit; a reload may change it
        self._usage.setdefault(tenant, TokenWindow()).add(self._clock(), tokens)
