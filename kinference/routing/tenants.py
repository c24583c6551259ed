"""Tenant admission: allowed models and QoS classes, and token budgets per minute."""

from __future__ import annotations

import time
from collections.abc import Callable

from kinference.config import Policy
from kinference.routing.budget import WINDOW_S, Budget, LocalBudget, TokenWindow

__all__ = ["WINDOW_S", "Budget", "LocalBudget", "TenantGate", "TokenWindow"]


class TenantGate:
    """Applies the policy's tenant rules (first match wins) and per-tenant token budgets.

    Usage outlives policy reloads; the rules come with each call, from the policy in force.
    The token accounting is the `budget`'s: this process's own by default (`LocalBudget`),
    or the cluster's (`kinference.cluster.leases.LeasedBudget`).
    """

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, budget: Budget | None = None
    ) -> None:
        self.budget: Budget = LocalBudget(clock) if budget is None else budget

    def check(self, policy: Policy, tenant: str, names: tuple[str, ...], qos: str) -> str | None:
        """Why the request is rejected, or None when admitted. `names` are every name the
        requested model goes by (as asked, canonical, aliases). The budget is asked last,
        so None means the request is admitted."""
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
        if limit is not None and (reason := self.budget.exhausted(tenant, limit)) is not None:
            return f"{who} {reason}"
        return None

    def used(self, tenant: str) -> int:
        return self.budget.used(tenant)

    def record(self, policy: Policy, tenant: str, tokens: int) -> None:
        """Count reported tokens against the tenant (only tenants with a budget are kept)."""
        rule = policy.tenant_rule(tenant)
        if tokens <= 0 or rule is None or rule.tokens_per_minute is None:
            return
        self.budget.record(tenant, rule.tokens_per_minute, tokens)
