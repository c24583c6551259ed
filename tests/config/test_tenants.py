"""Tenant rules: first match wins, "" and "*" per the spec, and unreachable rules."""

from __future__ import annotations

import pytest

from kinference.config import Policy, TenantRule, parse_policy
from tests.config.helpers import BASE, BASE_LINES, policy_error

RULES = """\
models:
  - {name: llama, aliases: [llama3], targets: [{pool: default/chat, model: small}]}
tenants:
  - {tenant: team-a, models: [llama], qos: [INTERACTIVE, BATCH], tokens_per_minute: 200000}
  - {tenant: "", models: [small], qos: [DEFERRABLE]}
  - {tenant: "*", models: [llama3, large]}
"""


def test_rule_fields_and_defaults() -> None:
    policy = parse_policy(BASE + RULES)
    rule = policy.tenants[0]
    assert (rule.tenant, rule.models, rule.qos, rule.tokens_per_minute) == (
        "team-a",
        ("llama",),
        ("INTERACTIVE", "BATCH"),
        200000,
    )
    anyone = TenantRule(tenant="x")
    assert (anyone.models, anyone.qos, anyone.tokens_per_minute) == (None, None, None)
    assert policy.default_tenant_action == "allow"


@pytest.mark.parametrize(
    ("tenant", "rule_index"),
    [("team-a", 0), ("", 1), ("team-b", 2), ("*", 2), ("TEAM-A", 2), (" team-a", 2)],
)
def test_tenant_rule_first_match(tenant: str, rule_index: int) -> None:
    policy = parse_policy(BASE + RULES)
    assert policy.tenant_rule(tenant) is policy.tenants[rule_index]


def test_star_never_matches_the_empty_tenant() -> None:
    policy = parse_policy(BASE + 'tenants:\n  - {tenant: "*"}\ndefault_tenant_action: reject\n')
    assert policy.tenant_rule("") is None
    assert policy.tenant_rule("anyone") is policy.tenants[0]
    assert policy.default_tenant_action == "reject"


def test_empty_tenant_rule_matches_only_the_empty_tenant() -> None:
    policy = parse_policy(BASE + 'tenants:\n  - {tenant: ""}\n')
    assert policy.tenant_rule("") is policy.tenants[0]
    assert policy.tenant_rule("team-a") is None


def test_no_rules_match_nobody() -> None:
    assert Policy().tenant_rule("") is None and Policy().tenant_rule("a") is None


@pytest.mark.parametrize(
    ("rule", "tenant", "expected"),
    [
        ("", "", True),
        ("", "a", False),
        ("*", "", False),
        ("*", "a", True),
        ("a", "a", True),
        ("a", "b", False),
        ("a", "", False),
    ],
)
def test_rule_matches(rule: str, tenant: str, expected: bool) -> None:
    assert TenantRule(tenant=rule).matches(tenant) is expected


def test_allows_model_by_any_name_of_the_route() -> None:
    policy = parse_policy(BASE + RULES)
    llama, small = policy.resolve_model("llama3"), policy.resolve_model("small")
    assert llama is not None and small is not None
    team_a, anonymous, anyone = policy.tenants
    assert team_a.allows_model(llama.names)  # asked as alias, rule names the entry
    assert anyone.allows_model(llama.names)  # rule names the alias
    assert not team_a.allows_model(small.names)  # a pool model is its own route
    assert anonymous.allows_model(small.names)
    assert TenantRule(tenant="x").allows_model(("whatever",))
    assert not TenantRule(tenant="x", models=()).allows_model(small.names)


def test_allows_qos() -> None:
    team_a = parse_policy(BASE + RULES).tenants[0]
    assert team_a.allows_qos("INTERACTIVE") and team_a.allows_qos("BATCH")
    assert not team_a.allows_qos("DEFERRABLE")
    assert TenantRule(tenant="x").allows_qos("DEFERRABLE")


def at(line: int) -> str:
    return f"policy.yaml:{BASE_LINES + line}"


def test_unknown_tenant_model_names_its_line() -> None:
    text = f"""{BASE}tenants:
  - tenant: a
    models:
      - small
      - smal
"""
    assert policy_error(text) == (
        f"{at(5)}: tenants[0].models[1]: unknown model 'smal': not a name or alias under "
        "'models', nor a model any pool serves"
    )


def test_later_rule_for_the_same_tenant_is_unreachable() -> None:
    text = f"""{BASE}tenants:
  - {{tenant: a, models: [small]}}
  - {{tenant: b}}
  - {{tenant: a, models: [large]}}
"""
    assert policy_error(text) == (
        f"{at(4)}: tenants[2].tenant: unreachable: tenants[0] ('a') matches tenant 'a' first"
    )


def test_named_rule_after_star_is_unreachable() -> None:
    text = f"""{BASE}tenants:
  - {{tenant: "*"}}
  - {{tenant: ""}}
  - tenant: team-b
    qos: [BATCH]
"""
    assert policy_error(text) == (
        f"{at(4)}: tenants[2].tenant: unreachable: tenants[0] ('*') matches tenant 'team-b' first"
    )


def test_second_empty_or_star_rule_is_unreachable() -> None:
    text = f"{BASE}tenants:\n  - {{tenant: ''}}\n  - {{tenant: '*'}}\n  - {{tenant: ''}}\n"
    assert policy_error(text).startswith(f"{at(4)}: tenants[2].tenant: unreachable: tenants[0]")
    text = f"{BASE}tenants:\n  - {{tenant: '*'}}\n  - {{tenant: '*'}}\n"
    assert policy_error(text).startswith(f"{at(3)}: tenants[1].tenant: unreachable: tenants[0]")


@pytest.mark.parametrize(
    ("rule", "problem"),
    [
        ("{tenant: a, qos: [BATCH, URGENT]}", "tenants[0].qos[1]: Input should be 'INTERACTIVE'"),
        ("{tenant: a, qos: [BATCH, BATCH]}", "tenants[0].qos[1]: duplicate QoS class 'BATCH'"),
        ("{tenant: a, models: [small, small]}", "tenants[0].models[1]: duplicate model 'small'"),
        ("{tenant: a, tokens_per_minute: 0}", "tenants[0].tokens_per_minute: Input should be"),
        ("{tenant: ' a'}", "tenants[0].tenant: expected a tenant without surrounding spaces"),
        ("{models: [small]}", "tenants[0].tenant: required key is missing"),
        ("{tenant: a, budget: 5}", "tenants[0].budget: unknown key"),
    ],
)
def test_invalid_rule_is_named(rule: str, problem: str) -> None:
    assert policy_error(f"{BASE}tenants:\n  - {rule}\n").startswith(f"{at(2)}: {problem}")


def test_default_tenant_action_values() -> None:
    assert policy_error("default_tenant_action: deny\n").startswith(
        "policy.yaml:1: default_tenant_action: Input should be 'allow' or 'reject'"
    )


@pytest.mark.parametrize("tenant", ["", "team-a", "team-b", "*", "x"])
def test_lookup_agrees_with_first_match_in_file_order(tenant: str) -> None:
    policy = parse_policy(BASE + RULES)
    first = next((rule for rule in policy.tenants if rule.matches(tenant)), None)
    assert policy.tenant_rule(tenant) is first
