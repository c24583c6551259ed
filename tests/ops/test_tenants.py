"""The tenant label is capped: callers cannot grow the metric without bound."""

from __future__ import annotations

from kinference.config import parse_policy
from kinference.ops.tenants import NONE, OTHER, TenantLabels
from tests.api.helpers import chat_body
from tests.conftest import MODEL, PickerFactory
from tests.ops.helpers import OPS_POLICY


def test_the_first_tenants_keep_their_names_the_rest_share_other() -> None:
    labels = TenantLabels(2)
    assert [labels.label(t) for t in ("a", "b", "c", "a", "d", "")] == ["a", "b", OTHER, "a",
                                                                          OTHER, NONE]  # fmt: skip


def test_a_caller_cannot_name_an_internal_label() -> None:
    """Tenants come from callers: one named "(other)" or "(none)" gets a label of its own,
    not the series of the tenants past the cap or of the requests without a tenant."""
    labels = TenantLabels(10)
    names = ["(other)", "(none)", "((other)", "(", "((", "other", ""]
    assigned = [labels.label(t) for t in names]
    assert OTHER not in assigned[:-1] and NONE not in assigned[:-1]
    assert len(set(assigned)) == len(names)


async def test_live_tenant_series_stay_within_the_cap(start_picker: PickerFactory) -> None:
    picker = await start_picker(parse_policy(OPS_POLICY), metrics_max_tenants=2)
    client = picker.client
    for tenant in ("t1", "t2", "t3", "t4", ""):
        pick = await client.pick((await client.push([chat_body()])).stream_id, tenant=tenant)
        await client.final_token(pick.response_id, model=MODEL, prompt_tokens=10,
                                 completion_tokens=1)  # fmt: skip
    registry = picker.app.metrics.registry
    tenants = {
        sample.labels["tenant"]
        for family in registry.collect()
        if family.name == "kinference_tenant_tokens"
        for sample in family.samples
        if sample.name.endswith("_total")
    }
    assert tenants == {"t1", "t2", OTHER, NONE}
    assert (
        picker.metric("kinference_tenant_tokens_total", {"tenant": OTHER, "kind": "prompt"}) == 20
    )
