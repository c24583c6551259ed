"""A bounded `tenant` label: the tenant string comes from callers, so it is capped."""

from __future__ import annotations

from kinference.config.tenants import counted_name

# Internal labels: a caller's tenant never is one (`counted_name`).
OTHER = "(other)"  # every tenant past the cap
NONE = "(none)"  # requests without a tenant


class TenantLabels:
    """The first `limit` distinct tenants seen keep their name as a label value; later ones
    share `(other)`, so a caller inventing tenants cannot grow the metric without bound. A
    tenant is labelled `counted_name(tenant)`: one named "(other)" is labelled "((other)".
    Tenants named in the policy are usually among the first seen; raise
    KINFERENCE_METRICS_MAX_TENANTS when `(other)` carries a noticeable share.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._named: set[str] = set()

    def label(self, tenant: str) -> str:
        if not tenant:
            return NONE
        name = counted_name(tenant)
        if name in self._named:
            return name
        if len(self._named) < self.limit:
            self._named.add(name)
            return name
        return OTHER
