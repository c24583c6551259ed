"""Tenant admission as a pipeline step: the policy's tenant rules and token budgets.

The rules and the budget accounting are `TenantGate`'s (routing/tenants.py, routing/
budget.py); this filter asks it once per Pick and passes on its typed answer (TENANT_RULE or
TENANT_BUDGET, with the text).
"""

from __future__ import annotations

from typing import ClassVar

from kinference.config import Policy
from kinference.routing.plugins.base import Rejection
from kinference.routing.tenants import TenantGate


class TenantFilter:
    name: ClassVar[str] = "tenant"

    def __init__(self, gate: TenantGate) -> None:
        self.gate = gate

    def admit(
        self, policy: Policy, tenant: str, names: tuple[str, ...], qos: str
    ) -> Rejection | None:
        """None when the request is admitted, else why not. `names` are every name the
        requested model goes by (as asked, canonical, aliases)."""
        return self.gate.check(policy, tenant, names, qos)
