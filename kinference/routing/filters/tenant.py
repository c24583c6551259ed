"""Tenant admission as a pipeline step: the policy's tenant rules and token budgets.

The rules and the budget accounting are `TenantGate`'s (routing/tenants.py, routing/
budget.py); this filter asks it once per Pick and types its answer: a rule that does not
match or forbids the model or QoS class is TENANT_RULE, anything else the gate refuses
(the tenant's budget, this replica's share of it) is TENANT_BUDGET.
"""

from __future__ import annotations

from typing import ClassVar

from kinference.config import Policy
from kinference.routing.plugins.base import Rejection
from kinference.routing.reasons import Reason
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
        text = self.gate.check(policy, tenant, names, qos)
        if text is None:
            return None
        rule = policy.tenant_rule(tenant)
        by_rule = rule is None or not rule.allows_model(names) or not rule.allows_qos(qos)
        return Rejection(Reason.TENANT_RULE if by_rule else Reason.TENANT_BUDGET, text)
