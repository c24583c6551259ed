"""Tenant admission: allowed models and QoS classes, and token budgets per minute."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from kinference.config import Policy

WINDOW_S = 60.0  # tokens_per_minute is measured over a sliding 60-second window
_BUCKET_S = 1.0  # usage is kept per second, so the window slides in 1-second steps


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


class TenantGate:
    """Applies the policy's tenant rules (first match wins) and per-tenant token budgets.

    Usage outlives policy reloads; the rules come with each call, from the policy in force.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._usage: dict[str, TokenWindow] = {}

    def check(self, policy: Policy, tenant: str, names: tuple[str, ...], qos: str) -> str | None:
        """Why the request is rejected, or None when admitted. `names` are every name the
        requested model goes by (as asked, canonical, aliases)."""
        rule = policy.tenant_rule(tenant)
        who = f"tenant {tenant!r}" if tenant else "the empty tenant"
        if rule is None:
            allowed = policy.default_tenant_action == "allow"
            return None if allowed else f"{who} matches no tenant rule"
        if not rule.allows_model(names):
            return f"{who} may not use model {names[0]!r}"
        if not rule.allows_qos(qos):
            return f"{who} may not use QoS class {qos}"
        limit = rule.tokens_per_minute
        if limit is not None and (used := self.used(tenant)) >= limit:
            return f"{who} used its budget: {used} of {limit} tokens in the last minute"
        return None

    def used(self, tenant: str) -> int:
        window = self._usage.get(tenant)
        return 0 if window is None else window.used(self._clock())

    def record(self, policy: Policy, tenant: str, tokens: int) -> None:
        """Count reported tokens against the tenant (only tenants with a budget are kept)."""
        rule = policy.tenant_rule(tenant)
        if tokens <= 0 or rule is None or rule.tokens_per_minute is None:
            return
        self._usage.setdefault(tenant, TokenWindow()).add(self._clock(), tokens)
