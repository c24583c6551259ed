"""Tenant rules: which models and QoS classes a tenant may use, and its token budget.

Rules are matched in file order and the first match applies. The tenant is the Pick's
`tenant` field, and per the spec "" is a value of its own: a rule for `""` matches only
the empty tenant, and `"*"` matches every named tenant but never the empty one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import PositiveInt, field_validator

from kinference.config.fields import ItemError, ModelName, PolicyModel, reject_duplicates

# PickRequest.QosClass names, as written in the policy file.
QosClass = Literal["INTERACTIVE", "BATCH", "DEFERRABLE"]
# What happens to a tenant no rule matches.
TenantAction = Literal["allow", "reject"]

ANY_NAMED_TENANT = "*"
# The longest tenant a Pick may name (UTF-8 bytes): tenants become Redis keys and metric
# labels, so a caller must not choose their size. Longer is INVALID_ARGUMENT.
MAX_TENANT_BYTES = 256
# Tenants with a budget tracked at once, per replica and in Redis; a `"*"` rule lets callers
# name any number of them, so beyond this the newest share one overflow budget and label.
MAX_TRACKED_TENANTS = 1000
# Internal names (this one, and the metric labels "(other)" and "(none)" of ops/tenants.py)
# start with one "(" and a letter. Callers may name any tenant, these too, so a caller's
# tenant is counted and labelled under `counted_name(tenant)`, which never is one of them.
OVERFLOW_TENANT = "(overflow)"


def counted_name(tenant: str) -> str:
    """The name a caller's tenant is counted (its budget, its Redis keys) and labelled
    (metrics) under: itself, with one more "(" in front when it starts with "(" ("(overflow)"
    -> "((overflow)"). No caller reaches an internal name, and distinct tenants keep
    distinct names (the map is one-to-one)."""
    return "(" + tenant if tenant.startswith("(") else tenant


class TenantRule(PolicyModel):
    """What one tenant (or every named tenant, for `"*"`) may do."""

    tenant: str
    # Model names or aliases this tenant may ask for; None allows every model, [] none.
    models: tuple[ModelName, ...] | None = None
    # QoS classes this tenant may use; None allows all three.
    qos: tuple[QosClass, ...] | None = None
    # Prompt plus completion tokens per minute, per tenant (a `"*"` rule gives each named
    # tenant its own budget); None is unlimited. Fed by ReportFinalToken.
    tokens_per_minute: PositiveInt | None = None

    @field_validator("tenant")
    @classmethod
    def _trimmed(cls, tenant: str) -> str:
        if tenant != tenant.strip():
            raise ValueError(f"expected a tenant without surrounding spaces, got {tenant!r}")
        return tenant

    @field_validator("models")
    @classmethod
    def _unique_models(cls, models: tuple[str, ...] | None) -> tuple[str, ...] | None:
        reject_duplicates(models or (), "model")
        return models

    @field_validator("qos")
    @classmethod
    def _unique_qos(cls, qos: tuple[str, ...] | None) -> tuple[str, ...] | None:
        reject_duplicates(qos or (), "QoS class")
        return qos

    def matches(self, tenant: str) -> bool:
        """Whether this rule is written for `tenant` (ignoring rules before it)."""
        if self.tenant == ANY_NAMED_TENANT:
            return tenant != ""
        return tenant == self.tenant

    def allows_qos(self, qos: str) -> bool:
        """Whether the QoS class named `qos` (e.g. "BATCH") is allowed."""
        return self.qos is None or qos in self.qos

    def allows_model(self, names: Sequence[str]) -> bool:
        """Whether any of `names` (a model's canonical name and aliases) is allowed."""
        return self.models is None or any(name in self.models for name in names)


def unreachable_rules(rules: Sequence[TenantRule]) -> list[ItemError]:
    """An error for each rule an earlier rule always matches first.

    That is a later rule for the same tenant, or a rule for a named tenant after `"*"`:
    it can never apply, and was almost certainly meant to.
    """
    errors: list[ItemError] = []
    seen: dict[str, int] = {}
    for index, rule in enumerate(rules):
        earlier = seen.get(rule.tenant)
        if earlier is None and rule.tenant != "":
            earlier = seen.get(ANY_NAMED_TENANT)
        if earlier is not None:
            errors.append(
                ItemError(
                    f"unreachable: tenants[{earlier}] ({rules[earlier].tenant!r}) "
                    f"matches tenant {rule.tenant!r} first",
                    "tenants",
                    index,
                    "tenant",
                )
            )
        seen.setdefault(rule.tenant, index)
    return errors
