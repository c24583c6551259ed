"""Tenant rules end to end: allowed models and QoS classes, "" and "*", token budgets."""

from __future__ import annotations

import pytest

from tests.conftest import PickerFactory, RunningPicker
from tests.scenarios.helpers import (
    BATCH,
    DEFERRABLE,
    INTERACTIVE,
    OK,
    POLICY_REJECTED,
    EnginesFactory,
    chat,
    finish,
    outcome_name,
    pick,
    routing_yaml,
    start_with,
    vllm_pool,
    wait_engines,
)

SMALL = "small-model"
BIG = "big-model"

RULES = f"""
tenants:
  - {{tenant: team-a, models: [{SMALL}], qos: [INTERACTIVE, BATCH], tokens_per_minute: 1000}}
  - {{tenant: "", models: [{SMALL}], qos: [DEFERRABLE]}}
  - {{tenant: "*", models: [{BIG}], tokens_per_minute: 500}}
default_tenant_action: reject
"""


async def _cluster(
    start_engines: EnginesFactory, start_picker: PickerFactory, rules: str
) -> RunningPicker:
    engines = await start_engines(2)
    policy = "pools:\n" + vllm_pool("chat", engines.endpoints, [SMALL, BIG]) + routing_yaml()
    picker = await start_with(start_picker, policy + rules)
    await wait_engines(picker, engines.endpoints)
    return picker


async def _verdict(picker: RunningPicker, tenant: str, model: str, qos: int = INTERACTIVE) -> str:
    """ "ok", or the POLICY_REJECTED reason; a placed pick is finished (no tokens)."""
    result = await pick(picker, chat(model, "hello"), tenant=tenant, qos=qos)
    if result.outcome == POLICY_REJECTED:
        assert result.reason
        assert result.response_id == 0
        assert result.requested_model == model
        return result.reason
    assert result.outcome == OK, f"{outcome_name(result)}: {result.reason}"
    await finish(picker, result)
    return "ok"


@pytest.mark.parametrize(
    "case",
    [
        ("team-a", SMALL, INTERACTIVE, "ok"),
        ("team-a", SMALL, BATCH, "ok"),
        ("team-a", SMALL, DEFERRABLE, "tenant 'team-a' may not use QoS class DEFERRABLE"),
        ("team-a", BIG, INTERACTIVE, f"tenant 'team-a' may not use model {BIG!r}"),
        # "" matches only the empty tenant's rule, never "*".
        ("", SMALL, DEFERRABLE, "ok"),
        ("", SMALL, INTERACTIVE, "the empty tenant may not use QoS class INTERACTIVE"),
        ("", BIG, DEFERRABLE, f"the empty tenant may not use model {BIG!r}"),
        # "*" matches every named tenant without a rule of its own.
        ("team-z", BIG, INTERACTIVE, "ok"),
        ("team-z", BIG, DEFERRABLE, "ok"),
        ("team-z", SMALL, INTERACTIVE, f"tenant 'team-z' may not use model {SMALL!r}"),
    ],
    ids=lambda case: f"{case[0] or 'empty'}-{case[1]}-{case[2]}",
)
async def test_first_matching_rule_decides(
    start_engines: EnginesFactory, start_picker: PickerFactory, case: tuple[str, str, int, str]
) -> None:
    tenant, model, qos, expected = case
    picker = await _cluster(start_engines, start_picker, RULES)
    assert await _verdict(picker, tenant, model, qos) == expected


async def test_empty_tenant_never_matches_a_named_rule_or_star(
    start_engines: EnginesFactory, start_picker: PickerFactory
) -> None:
    named_only = "tenants:\n  - {tenant: team-a}\ndefault_tenant_action: reject\n"
    picker = await _cluster(start_engines, start_picker, named_only)
    assert await _verdict(picker, "team-a", SMALL) == "ok"
    assert await _verdict(picker, "", SMALL) == "the empty tenant matches no tenant rule"
    assert await _verdict(picker, "team-b", SMALL) == "tenant 'team-b' matches no tenant rule"

    star_only = 'tenants:\n  - {tenant: "*", models: []}\ndefault_tenant_action: allow\n'
    picker = await _cluster(start_engines, start_picker, star_only)
    assert await _verdict(picker, "", SMALL) == "ok"  # "*" does not match "": the default
    assert await _verdict(picker, "anyone", SMALL) == f"tenant 'anyone' may not use model {SMALL!r}"


async def test_token_budget_fed_by_final_reports(
    start_engines: EnginesFactory, start_picker: PickerFactory
) -> None:
    picker = await _cluster(start_engines, start_picker, RULES)
    first = await pick(picker, chat(SMALL, "long task"), tenant="team-a")
    second = await pick(picker, chat(SMALL, "second task"), tenant="team-a")
    assert first.outcome == second.outcome == OK
    await finish(picker, first, prompt_tokens=600, completion_tokens=300)  # 900 of 1000
    # The second request's reservation (its prompt and the learned output) counts before its
    # report: no third one gets in on the strength of tokens not reported yet.
    assert "budget" in await _verdict(picker, "team-a", SMALL)
    await finish(picker, second, prompt_tokens=50, completion_tokens=50)  # 1000 of 1000

    rejected = await _verdict(picker, "team-a", SMALL)
    assert "budget" in rejected, rejected
    assert "1000 of 1000 tokens" in rejected, rejected
    assert await _verdict(picker, "team-a", SMALL, BATCH) == rejected

    # Other tenants' budgets are their own; "*" gives each named tenant one.
    assert await _verdict(picker, "team-x", BIG) == "ok"
    spender = await pick(picker, chat(BIG, "big task"), tenant="team-x")
    await finish(picker, spender, prompt_tokens=400, completion_tokens=100)
    assert "budget" in await _verdict(picker, "team-x", BIG)
    assert await _verdict(picker, "team-y", BIG) == "ok"
    # The empty tenant has no budget: reports for it count against nobody.
    empty = await pick(picker, chat(SMALL, "anon"), tenant="", qos=DEFERRABLE)
    await finish(picker, empty, prompt_tokens=10**6, completion_tokens=0)
    assert await _verdict(picker, "", SMALL, DEFERRABLE) == "ok"
