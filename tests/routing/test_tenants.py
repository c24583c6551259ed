"""TenantGate: first matching rule, model and QoS rejections, tokens per minute (LocalBudget
by default, or any Budget it is given)."""

from __future__ import annotations

import pytest

from kinference.config import Policy, parse_policy
from kinference.config.tenants import OVERFLOW_TENANT
from kinference.routing import TenantGate
from kinference.routing.budget import Budget, LocalBudget
from kinference.routing.reasons import Reason
from kinference.routing.tenants import WINDOW_S, Rejection, TokenWindow
from tests.clock import FakeClock

POOLS = """\
pools:
  - {name: chat, endpoints: ["10.0.0.5:8000"], models: [llama-8b-instruct, qwen]}
models:
  - {name: llama, aliases: [llama3], targets: [{pool: default/chat, model: llama-8b-instruct}]}
"""
RULES = """\
tenants:
  - {tenant: team-a, models: [llama], qos: [INTERACTIVE, BATCH], tokens_per_minute: 100}
  - {tenant: team-b, models: [llama3, qwen]}
  - {tenant: "", models: [qwen], qos: [DEFERRABLE]}
  - {tenant: "*", models: [qwen], tokens_per_minute: 50}
"""
LLAMA = ("llama", "llama", "llama3")  # as asked, canonical, aliases
LLAMA3 = ("llama3", "llama", "llama3")
QWEN = ("qwen", "qwen")
POOL_LLAMA = ("llama-8b-instruct", "llama-8b-instruct")


def policy(rules: str = RULES, default: str = "allow") -> Policy:
    return parse_policy(POOLS + rules + f"default_tenant_action: {default}\n")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def gate(clock: FakeClock) -> TenantGate:
    return TenantGate(clock)


@pytest.mark.parametrize(
    ("tenant", "names", "qos", "rejected"),
    [
        ("team-a", LLAMA, "INTERACTIVE", None),
        ("team-a", LLAMA3, "BATCH", None),  # an alias of an allowed entry
        ("team-a", QWEN, "INTERACTIVE", "tenant 'team-a' may not use model 'qwen'"),
        ("team-a", LLAMA, "DEFERRABLE", "tenant 'team-a' may not use QoS class DEFERRABLE"),
        ("team-a", POOL_LLAMA, "INTERACTIVE", "may not use model 'llama-8b-instruct'"),
        ("team-b", LLAMA, "DEFERRABLE", None),  # the entry's name, allowed by its alias
        ("team-b", QWEN, "BATCH", None),
        ("", QWEN, "DEFERRABLE", None),
        ("", QWEN, "INTERACTIVE", "the empty tenant may not use QoS class INTERACTIVE"),
        ("", LLAMA, "DEFERRABLE", "the empty tenant may not use model 'llama'"),
        ("team-z", QWEN, "INTERACTIVE", None),  # "*"
        ("team-z", LLAMA, "INTERACTIVE", "tenant 'team-z' may not use model 'llama'"),
        ("*", QWEN, "INTERACTIVE", None),
    ],
)
def test_rules(
    gate: TenantGate, tenant: str, names: tuple[str, ...], qos: str, rejected: str | None
) -> None:
    reason = gate.check(policy(), tenant, names, qos)
    if rejected is None:
        assert reason is None
    else:
        assert reason is not None
        assert rejected in reason.text
        assert reason.code is Reason.TENANT_RULE


def test_first_rule_wins(gate: TenantGate) -> None:
    # Rules for team-a may not repeat (validation), but a named rule before "*" shadows it.
    rules = 'tenants:\n  - {tenant: team-a, models: []}\n  - {tenant: "*"}\n'
    assert gate.check(policy(rules), "team-a", QWEN, "BATCH") is not None
    assert gate.check(policy(rules), "team-c", QWEN, "BATCH") is None


def test_empty_tenant_only_matches_its_own_rule(gate: TenantGate) -> None:
    rules = 'tenants:\n  - {tenant: "", models: []}\n'
    assert gate.check(policy(rules), "", QWEN, "BATCH") is not None
    assert gate.check(policy(rules), "team-a", QWEN, "BATCH") is None  # no rule: allow
    assert gate.check(policy(rules, "reject"), "team-a", QWEN, "BATCH") is not None


def test_star_never_matches_the_empty_tenant(gate: TenantGate) -> None:
    rules = 'tenants:\n  - {tenant: "*"}\n'
    assert gate.check(policy(rules, "reject"), "team-a", QWEN, "BATCH") is None
    reason = gate.check(policy(rules, "reject"), "", QWEN, "BATCH")
    assert reason == Rejection(Reason.TENANT_RULE, "the empty tenant matches no tenant rule")
    assert gate.check(policy(rules, "allow"), "", QWEN, "BATCH") is None


def test_default_tenant_action(gate: TenantGate) -> None:
    assert gate.check(policy("", "allow"), "anyone", QWEN, "DEFERRABLE") is None
    assert gate.check(policy("", "allow"), "", QWEN, "DEFERRABLE") is None
    reason = gate.check(policy("", "reject"), "anyone", QWEN, "DEFERRABLE")
    assert reason == Rejection(Reason.TENANT_RULE, "tenant 'anyone' matches no tenant rule")
    assert gate.check(Policy(), "x", QWEN, "BATCH") is None  # the default is allow


def test_empty_models_list_allows_none(gate: TenantGate) -> None:
    rules = "tenants:\n  - {tenant: team-a, models: []}\n"
    assert gate.check(policy(rules), "team-a", QWEN, "BATCH") is not None
    assert gate.check(policy(rules), "team-a", LLAMA, "BATCH") is not None


def test_tokens_per_minute(gate: TenantGate, clock: FakeClock) -> None:
    rules = policy()
    gate.record(rules, "team-a", 60)
    assert gate.used("team-a") == 60
    assert gate.check(rules, "team-a", LLAMA, "INTERACTIVE") is None
    clock.now += 10
    gate.record(rules, "team-a", 40)
    reason = gate.check(rules, "team-a", LLAMA, "INTERACTIVE")
    text = "tenant 'team-a' used its budget: 100 of 100 tokens in the last minute"
    # Retry once the first 60 tokens left the window: 50 s from now, rounded up by a bucket.
    assert reason == Rejection(Reason.TENANT_BUDGET, text, retry_after_s=51)
    clock.now += 50.5  # the first 60 tokens are 60.5 s old: out of the window
    assert gate.used("team-a") == 40
    assert gate.check(rules, "team-a", LLAMA, "INTERACTIVE") is None
    clock.now += 10
    assert gate.used("team-a") == 0


def test_budget_is_checked_after_model_and_qos(gate: TenantGate) -> None:
    rules = policy()
    gate.record(rules, "team-a", 1000)
    reason = gate.check(rules, "team-a", QWEN, "INTERACTIVE")
    assert reason is not None
    assert "model" in reason.text


def test_star_gives_each_tenant_its_own_budget(gate: TenantGate) -> None:
    rules = policy()
    gate.record(rules, "team-x", 50)
    assert gate.check(rules, "team-x", QWEN, "BATCH") is not None
    assert gate.check(rules, "team-y", QWEN, "BATCH") is None
    assert gate.used("team-y") == 0


def test_only_budgeted_tenants_are_counted(gate: TenantGate) -> None:
    rules = policy()
    gate.record(rules, "team-b", 10_000)  # no budget
    gate.record(rules, "", 10_000)  # no budget
    gate.record(policy("", "allow"), "nobody", 10)  # no rule
    gate.record(rules, "team-a", 0)
    gate.record(rules, "team-a", -5)
    assert gate.used("team-b") == gate.used("") == gate.used("nobody") == gate.used("team-a") == 0


def test_usage_outlives_a_policy_reload(gate: TenantGate) -> None:
    gate.record(policy(), "team-a", 100)
    reloaded = policy("tenants:\n  - {tenant: team-a, tokens_per_minute: 150}\n")
    assert gate.check(reloaded, "team-a", QWEN, "DEFERRABLE") is None
    gate.record(reloaded, "team-a", 50)
    assert gate.check(reloaded, "team-a", QWEN, "DEFERRABLE") is not None


def test_a_token_never_leaves_the_window_early() -> None:
    """Buckets of 100 ms leave once all of them is a full window old: never before 60 s,
    at most 0.1 s after (issue 15: second buckets let a burst in up to 1 s early)."""
    assert WINDOW_S == 60.0
    window = TokenWindow()
    window.add(100.2, 1)
    window.add(100.25, 2)  # same 100 ms: one bucket
    window.add(100.9, 4)
    assert window.used(101.5) == 7
    assert window.used(160.25) == 7  # 60 s after the second token: still counted
    assert window.used(160.3) == 4
    assert window.used(160.95) == 4
    assert window.used(161.0) == 0
    assert window.total == 0
    window.add(200.0, 3)
    assert window.used(200.0) == 3


def test_an_adjustment_lands_in_its_own_bucket() -> None:
    window = TokenWindow()
    window.add(10.0, 100)
    window.add(30.0, 50)
    window.adjust(10.05, -60)  # a reservation settled lower, in the bucket it was made
    assert window.used(30.0) == 90
    assert window.used(70.2) == 50  # the adjusted bucket left with its reservation
    window.adjust(10.0, -40)  # gone from the window: nothing to adjust
    assert window.used(70.2) == 50


def test_window_over_many_seconds() -> None:
    window = TokenWindow()
    for second in range(120):
        window.add(second + 0.5, 1)
        assert window.used(second + 0.65) == min(second + 1, 60)


def test_the_default_budget_is_local(clock: FakeClock) -> None:
    gate = TenantGate(clock)
    assert isinstance(gate.budget, LocalBudget)
    budget = LocalBudget(clock)
    assert budget.exhausted("t", 10) is None
    budget.record("t", 10, 10)
    assert budget.used("t") == 10
    assert budget.exhausted("t", 10) == "used its budget: 10 of 10 tokens in the last minute"
    assert budget.exhausted("t", 11) is None  # the limit comes with each call
    clock.now += WINDOW_S + 0.1
    assert budget.exhausted("t", 10) is None


class FakeBudget:
    """Records what the gate delegates."""

    def __init__(self, reason: str | None = None) -> None:
        self.reason = reason
        self.calls: list[tuple[str, str, int, int]] = []

    def exhausted(self, tenant: str, limit: int) -> str | None:
        self.calls.append(("exhausted", tenant, limit, 0))
        return self.reason

    def used(self, tenant: str) -> int:
        return 42

    async def answered(self, tenant: str) -> None:
        self.calls.append(("answered", tenant, 0, 0))

    def frees_in(self, tenant: str, limit: int) -> float | None:
        return None  # cannot tell: the rejection carries no Retry-After

    def reserve(self, tenant: str, limit: int, tokens: int) -> float:
        self.calls.append(("reserve", tenant, limit, tokens))
        return 0.0

    def adjust(self, tenant: str, limit: int, at: float, tokens: int) -> None:
        self.calls.append(("adjust", tenant, limit, tokens))

    def forget_idle(self) -> None:
        self.calls.append(("forget_idle", "", 0, 0))


def test_the_gate_delegates_budgets_only(clock: FakeClock) -> None:
    fake = FakeBudget("used its share")
    budget: Budget = fake
    gate = TenantGate(clock, budget=budget)
    rules = policy()
    rejection = Rejection(Reason.TENANT_BUDGET, "tenant 'team-a' used its share")
    assert gate.check(rules, "team-a", LLAMA, "BATCH") == rejection
    assert gate.check(rules, "team-b", QWEN, "BATCH") is None  # no budget: not asked
    assert gate.check(rules, "team-a", QWEN, "BATCH") is not None  # model: not asked
    gate.record(rules, "team-x", 7)  # "*": 50 tokens per minute
    gate.record(rules, "team-b", 7)  # no budget: not recorded
    gate.record(rules, "team-a", 0)
    assert fake.calls == [("exhausted", "team-a", 100, 0), ("reserve", "team-x", 50, 7)]
    assert gate.used("anyone") == 42


async def test_the_gate_waits_on_the_budget_only_for_budgeted_tenants(clock: FakeClock) -> None:
    fake = FakeBudget()
    gate = TenantGate(clock, budget=fake)
    rules = policy()
    await gate.ready(rules, "team-b")  # no budget: the budget is not asked
    await gate.ready(rules, "team-a")
    assert fake.calls == [("answered", "team-a", 0, 0)]
    await LocalBudget(clock).answered("team-a")  # a local budget knows at once


def test_frees_in_is_when_enough_of_the_window_ages_out() -> None:
    window = TokenWindow()
    window.add(100.0, 30)  # bucket 1000: leaves at 160.1
    window.add(110.0, 30)  # leaves at 170.1
    window.add(120.0, 40)  # leaves at 180.1
    assert window.frees_in(125.0, 101) == 0.0  # 100 used, under a limit of 101: admitted now
    assert window.frees_in(125.0, 100) == pytest.approx(35.1)  # 30 out: 70 < 100
    assert window.frees_in(125.0, 60) == pytest.approx(45.1)  # 60 out: 40 < 60
    assert window.frees_in(125.0, 40) == pytest.approx(55.1)  # everything out: 0 < 40
    assert window.frees_in(175.0, 40) == pytest.approx(5.1)  # the first two already gone


def test_frees_in_counts_adjustments() -> None:
    window = TokenWindow()
    window.add(100.0, 80)
    window.add(110.0, 30)
    window.adjust(100.0, -60)  # a reservation settled lower: 20 + 30 left
    assert window.frees_in(115.0, 50) == pytest.approx(45.1)
    assert window.frees_in(115.0, 51) == 0.0


def test_a_budget_rejection_says_when_to_retry(gate: TenantGate, clock: FakeClock) -> None:
    rules = policy()
    gate.record(rules, "team-a", 100)
    clock.now += 20.03
    rejection = gate.check(rules, "team-a", LLAMA, "INTERACTIVE")
    assert rejection is not None and rejection.retry_after_s == 41  # 40.07 s, rounded up
    clock.now += 40.0
    rejection = gate.check(rules, "team-a", LLAMA, "INTERACTIVE")
    assert rejection is not None and rejection.retry_after_s == 1  # never 0 while rejected
    clock.now += 0.1
    assert gate.check(rules, "team-a", LLAMA, "INTERACTIVE") is None


def test_a_rule_rejection_has_no_retry_after(gate: TenantGate) -> None:
    rejection = gate.check(policy(), "team-a", QWEN, "INTERACTIVE")
    assert rejection is not None and rejection.retry_after_s is None


def test_a_caller_cannot_name_the_overflow_budget(clock: FakeClock) -> None:
    """A caller may name any tenant, "(overflow)" too; it is counted under a budget of its
    own, never the one the tenants past `max_tracked` share (nor another caller's)."""
    gate, rules = TenantGate(clock, max_tracked=1), policy()
    gate.record(rules, "(overflow)", 50)  # its "*" budget spent: tracked, a name of its own
    assert gate.check(rules, "(overflow)", QWEN, "BATCH") is not None
    assert gate.check(rules, "team-y", QWEN, "BATCH") is None  # past the cap: the overflow's
    assert gate.budget_name("team-y") == OVERFLOW_TENANT
    roomy = TenantGate(clock)  # every tenant tracked: each its own name
    names = {roomy.budget_name(t) for t in ("(overflow)", "((overflow)", "(", "((", "team-y")}
    assert len(names) == 5 and OVERFLOW_TENANT not in names
