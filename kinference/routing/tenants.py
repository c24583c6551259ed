"""Tenant admission: allowed models and QoS classes, and token budgets per minute.

Entry points (the routing pipeline and the service call them; all synchronous):
`check` admits or rejects, `reserve` charges an admitted request's expected tokens,
`settle` replaces a reservation by the reported count, `cancel` hands it back.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from kinference.config import Policy
from kinference.config.tenants import MAX_TRACKED_TENANTS, OVERFLOW_TENANT, counted_name
from kinference.routing.budget import WINDOW_S, Budget, LocalBudget, TokenWindow
from kinference.routing.plugins.base import Rejection  # TENANT_RULE or TENANT_BUDGET
from kinference.routing.reasons import Reason

__all__ = [
    "WINDOW_S",
    "Budget",
    "LocalBudget",
    "Rejection",
    "Reservation",
    "TenantGate",
    "TokenWindow",
]

DEFAULT_OUTPUT_TOKENS = 256  # reserved for a request without an output limit, until learned
_MEAN_WEIGHT = 0.05  # weight of each report in the learned mean of output tokens
TRACK_IDLE_S = 2 * WINDOW_S  # seconds: a tenant unseen this long no longer holds a place
_SWEEP_S = 1.0  # seconds between two sweeps of idle tenants when the places are full


@dataclass(slots=True)
class Reservation:
    """Tokens charged to a tenant's budget at admission, until settled or cancelled."""

    tenant: str  # the budget's name for it (OVERFLOW_TENANT beyond the tracked ones)
    limit: int
    tokens: int
    at: float  # the budget's clock when charged


class TenantGate:
    """Applies the policy's tenant rules (first match wins) and per-tenant token budgets.

    Usage outlives policy reloads; the rules come with each call, from the policy in force.
    The token accounting is the `budget`'s: this process's own by default (`LocalBudget`),
    or the cluster's (`kinference.cluster.leases.LeasedBudget`). At most `max_tracked`
    tenants have a budget of their own at once; the others share OVERFLOW_TENANT's, so
    caller-chosen names cannot grow memory or Redis without bound.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        budget: Budget | None = None,
        *,
        max_tracked: int = MAX_TRACKED_TENANTS,
    ) -> None:
        self.budget: Budget = LocalBudget(clock) if budget is None else budget
        self._clock = clock
        self._max_tracked = max_tracked
        self._tracked: dict[str, float] = {}  # tenant -> last seen (clock)
        self._swept_at = float("-inf")
        self.mean_output_tokens = float(DEFAULT_OUTPUT_TOKENS)

    def check(
        self, policy: Policy, tenant: str, names: tuple[str, ...], qos: str
    ) -> Rejection | None:
        """Why the request is rejected, or None when admitted. `names` are every name the
        requested model goes by (as asked, canonical, aliases). The budget is asked last,
        so None means the request is admitted; `reserve` must follow in the same turn."""
        rule = policy.tenant_rule(tenant)
        who = f"tenant {tenant!r}" if tenant else "the empty tenant"
        if rule is None:
            allowed = policy.default_tenant_action == "allow"
            return (
                None if allowed else Rejection(Reason.TENANT_RULE, f"{who} matches no tenant rule")
            )
        if not rule.allows_model(names):
            return Rejection(Reason.TENANT_RULE, f"{who} may not use model {names[0]!r}")
        if not rule.allows_qos(qos):
            return Rejection(Reason.TENANT_RULE, f"{who} may not use QoS class {qos}")
        limit = rule.tokens_per_minute
        if limit is None:
            return None
        name = self.budget_name(tenant)
        reason = self.budget.exhausted(name, limit)
        if reason is None:
            return None
        frees_in = self.budget.frees_in(name, limit)
        # Retry-After is whole seconds: rounded up, and at least 1 (the window is still full).
        retry = None if frees_in is None else max(math.ceil(frees_in), 1)
        return Rejection(Reason.TENANT_BUDGET, f"{who} {reason}", retry)

    def budgeted(self, policy: Policy, tenant: str) -> bool:
        """Whether `tenant` has a token budget (only then may `ready` have to wait)."""
        rule = policy.tenant_rule(tenant)
        return rule is not None and rule.tokens_per_minute is not None

    async def ready(self, policy: Policy, tenant: str) -> None:
        """Wait, bounded, until the budget can answer `check` for `tenant` (a cluster budget
        that asked for a lease and has not heard back); at once for a tenant without one."""
        if self.budgeted(policy, tenant):
            await self.budget.answered(self.budget_name(tenant))

    def reserve(
        self, policy: Policy, tenant: str, prompt_tokens: int, max_output_tokens: int | None
    ) -> Reservation | None:
        """Charge an admitted request: its prompt estimate plus its output limit (or the
        learned mean output). None for a tenant without a budget."""
        rule = policy.tenant_rule(tenant)
        if rule is None or rule.tokens_per_minute is None:
            return None
        output = max_output_tokens if max_output_tokens else round(self.mean_output_tokens)
        tokens = max(prompt_tokens + output, 1)
        name, limit = self.budget_name(tenant), rule.tokens_per_minute
        return Reservation(name, limit, tokens, self.budget.reserve(name, limit, tokens))

    def settle(self, reservation: Reservation | None, prompt: int, completion: int) -> None:
        """Replace a reservation by the tokens reported for its request."""
        if completion > 0:
            self.mean_output_tokens += _MEAN_WEIGHT * (completion - self.mean_output_tokens)
        if reservation is None:
            return
        delta = max(prompt + completion, 0) - reservation.tokens
        if delta:
            self.budget.adjust(reservation.tenant, reservation.limit, reservation.at, delta)

    def cancel(self, reservation: Reservation | None) -> None:
        """Hand a reservation back: its request never ran (Abort, TTL, nothing dispatched)."""
        if reservation is not None:
            self.budget.adjust(
                reservation.tenant, reservation.limit, reservation.at, -reservation.tokens
            )

    def record(self, policy: Policy, tenant: str, tokens: int) -> None:
        """Count reported tokens of a request admitted without a reservation."""
        rule = policy.tenant_rule(tenant)
        if tokens <= 0 or rule is None or rule.tokens_per_minute is None:
            return
        self.budget.reserve(self.budget_name(tenant), rule.tokens_per_minute, tokens)

    def used(self, tenant: str) -> int:
        return self.budget.used(self.budget_name(tenant))

    def budget_name(self, tenant: str) -> str:
        """The name `tenant`'s tokens are counted under: its own (`counted_name`: never an
        internal one), or OVERFLOW_TENANT when `max_tracked` other tenants were seen within
        TRACK_IDLE_S."""
        now = self._clock()
        if tenant in self._tracked or self._has_room(now):
            self._tracked[tenant] = now
            return counted_name(tenant)
        return OVERFLOW_TENANT

    def _has_room(self, now: float) -> bool:
        if len(self._tracked) < self._max_tracked:
            return True
        if now - self._swept_at < _SWEEP_S:
            return False
        self._swept_at = now
        for tenant in [name for name, seen in self._tracked.items() if now - seen > TRACK_IDLE_S]:
            del self._tracked[tenant]
        self.budget.forget_idle()
        return len(self._tracked) < self._max_tracked
