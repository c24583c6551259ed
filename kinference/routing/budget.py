"""Token budgets per tenant: the accounting TenantGate delegates to.

Tokens are reserved at admission (the prompt estimate plus the output limit), settled to the
reported count at ReportFinalToken and handed back on Abort or TTL, so concurrent Picks see
each other's reservations: a budget is overshot by at most the one request admitted last.

`LocalBudget` counts this process's usage only (a standalone picker). A replica in a cluster
uses `kinference.cluster.leases.LeasedBudget`, which enforces one budget across replicas.
Every method here runs on the Pick path: none but `answered` (awaited before the decision,
and bounded) may wait on anything.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

WINDOW_S = 60.0  # tokens_per_minute is measured over a sliding 60-second window
_BUCKETS_PER_S = 10  # usage is kept per 100 ms; a bucket leaves the window once all of it has


class Budget(Protocol):
    """Tokens per minute per tenant; `limit` comes with each call, from the policy in force."""

    def exhausted(self, tenant: str, limit: int) -> str | None:
        """Why no more requests of `tenant` may be admitted now (completing "tenant X ..."),
        or None to admit one. Called only for tenants with a budget."""

    def used(self, tenant: str) -> int:
        """Tokens `tenant` used or reserved in the last minute, as far as this instance knows."""

    async def answered(self, tenant: str) -> None:
        """Return once `exhausted` can answer for `tenant` from what it was told: at once for
        a local budget; a cluster's waits, bounded, for a lease it asked for."""

    def frees_in(self, tenant: str, limit: int) -> float | None:
        """Seconds until `exhausted` admits `tenant` again as things stand (enough of its
        usage aged out of the window), or None when this instance cannot tell."""

    def reserve(self, tenant: str, limit: int, tokens: int) -> float:
        """Count `tokens` (> 0) for a request just admitted; returns when they were counted
        (this budget's clock), for `adjust`."""

    def adjust(self, tenant: str, limit: int, at: float, tokens: int) -> None:
        """Correct a reservation made at `at` by `tokens` (negative: handed back)."""

    def forget_idle(self) -> None:
        """Drop what is kept of tenants with nothing left in the window."""


class TokenWindow:
    """Tokens one tenant used in the last minute, in 100 ms buckets.

    A bucket counts until the window has passed its end, so a token is never forgotten
    before 60 s and at most one bucket (0.1 s) later.
    """

    def __init__(self) -> None:
        self._buckets: deque[list[int]] = deque()  # [bucket number, tokens]
        self.total = 0

    def add(self, now: float, tokens: int) -> None:
        bucket = math.floor(now * _BUCKETS_PER_S)
        if self._buckets and self._buckets[-1][0] == bucket:
            self._buckets[-1][1] += tokens
        else:
            self._buckets.append([bucket, tokens])
        self.total += tokens

    def adjust(self, at: float, tokens: int) -> None:
        """Add `tokens` to the bucket of time `at`, if it is still in the window."""
        bucket = math.floor(at * _BUCKETS_PER_S)
        for entry in reversed(self._buckets):
            if entry[0] == bucket:
                entry[1] += tokens
                self.total += tokens
                return
            if entry[0] < bucket:
                return

    def used(self, now: float) -> int:
        # Bucket b covers [b, b + 1) / _BUCKETS_PER_S: it leaves once the window passed its end.
        while self._buckets and self._buckets[0][0] + 1 <= (now - WINDOW_S) * _BUCKETS_PER_S:
            self.total -= self._buckets.popleft()[1]
        return self.total

    def frees_in(self, now: float, limit: int) -> float:
        """Seconds until fewer than `limit` tokens are left in the window (0: already)."""
        excess = self.used(now) - limit + 1
        if excess <= 0:
            return 0.0
        for bucket, tokens in self._buckets:  # oldest first: the order they leave in
            excess -= tokens
            if excess <= 0:  # bucket b leaves once the window passed its end
                return max((bucket + 1) / _BUCKETS_PER_S + WINDOW_S - now, 0.0)
        return WINDOW_S  # not reached: the buckets add up to the total

    def empty(self, now: float) -> bool:
        self.used(now)
        return not self._buckets


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

    async def answered(self, tenant: str) -> None:
        del tenant  # everything is known here

    def frees_in(self, tenant: str, limit: int) -> float | None:
        window = self._usage.get(tenant)
        return 0.0 if window is None else window.frees_in(self._clock(), limit)

    def reserve(self, tenant: str, limit: int, tokens: int) -> float:
        del limit  # usage is counted whatever the limit; a reload may change it
        now = self._clock()
        self._usage.setdefault(tenant, TokenWindow()).add(now, tokens)
        return now

    def adjust(self, tenant: str, limit: int, at: float, tokens: int) -> None:
        del limit
        window = self._usage.get(tenant)
        if window is not None:
            window.adjust(at, tokens)

    def record(self, tenant: str, limit: int, tokens: int) -> None:
        """Count reported tokens without a reservation."""
        self.reserve(tenant, limit, tokens)

    def forget_idle(self) -> None:
        """Drop tenants with nothing left in the window (the gate calls it when full)."""
        now = self._clock()
        for tenant in [name for name, window in self._usage.items() if window.empty(now)]:
            del self._usage[tenant]
