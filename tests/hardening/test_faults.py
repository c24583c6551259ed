"""The fault suite in quick form: real `kinference serve` subprocesses, each scenario held
to its targets (see loadtest/faults/__main__.py for what each one does)."""

from __future__ import annotations

from loadtest.faults.__main__ import run_scenario
from loadtest.faults.report import Row, rss_bound_mib


def assert_targets(row: Row) -> None:
    """No failed request, nothing held after the TTLs, RSS back within its bound."""
    assert not row.problems, row.problems
    assert row.tally.failed == 0, row.tally.examples
    assert row.tally.requests > 0
    assert (row.buffered_after, row.bodies_after, row.inflight_after) == (0, 0, 0)
    assert 0 < row.rss_after_mib <= rss_bound_mib(row.rss_baseline_mib)


async def test_redis_killed_paused_and_restarted_under_load() -> None:
    row = await run_scenario("redis", quick=True)
    assert_targets(row)
    assert not row.tally.spec_errors
    assert row.tally.outcomes["DEGRADED"] > 0  # the replicas noticed each fault
    assert row.state_equal is True


async def test_a_replica_killed_mid_request() -> None:
    row = await run_scenario("replica", quick=True)
    assert_targets(row)
    # Its callers (two looping, one mid-pull, one mid-push) saw UNAVAILABLE, and only that.
    assert set(row.tally.spec_errors) == {"UNAVAILABLE"}
    assert row.tally.spec_errors["UNAVAILABLE"] >= 2
    assert row.state_equal is True


async def test_callers_resetting_at_every_stage() -> None:
    row = await run_scenario("resets", quick=True)
    assert_targets(row)
    for stage in ("mid-push", "before-pick", "mid-pull", "before-reports"):
        assert f"'{stage}': 20" in str(row.notes)


async def test_a_thousand_requests_abandoned_at_random_stages() -> None:
    row = await run_scenario("abandon", quick=True)
    assert_targets(row)
    assert row.tally.requests > 1_000


async def test_a_slow_pull_of_a_big_body_beside_normal_traffic() -> None:
    row = await run_scenario("slow-pull", quick=True)
    assert_targets(row)  # includes the budget and Pick-latency checks (row.problems)
    assert any("16 MiB pulled" in note for note in row.notes)


async def test_a_flood_of_stalled_pushes() -> None:
    row = await run_scenario("stalled-push", quick=True)
    assert_targets(row)
    assert dict(row.tally.spec_errors) == {"DEADLINE_EXCEEDED": 200}
    assert row.tally.completed > 0  # well-behaved requests went through meanwhile


async def test_a_tenant_budget_under_concurrent_callers_and_redis_faults() -> None:
    row = await run_scenario("budget", quick=True)
    assert not row.problems, row.problems  # each phase within the budget + one per replica
    assert row.tally.failed == 0, row.tally.examples
    assert len(row.notes) == 3


async def test_a_flood_of_tenants_then_a_full_redis() -> None:
    row = await run_scenario("tenant-flood", quick=True)
    assert not row.problems, row.problems
    assert row.tally.failed == 0, row.tally.examples
    assert dict(row.tally.spec_errors) == {"INVALID_ARGUMENT": 200}  # the 20 kB tenants
