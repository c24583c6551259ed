"""InFlight: per-worker load between Pick and the final report, Abort or TTL; recently
released destinations remembered for late Aborts."""

from __future__ import annotations

import pytest

from kinference.routing import InFlight, LocalChoice, ProviderChoice, WorkerTable
from kinference.routing import inflight as inflight_module
from tests.clock import FakeClock

POOL = "default/chat"
ENDPOINT_A, ENDPOINT_B = "10.0.0.5:8000", "10.0.0.6:8000"
PROVIDER = ProviderChoice("ai/openai", "/v1/chat/completions", "gpt-4o-mini")


@pytest.fixture
def table() -> WorkerTable:
    return WorkerTable()


@pytest.fixture
def a(table: WorkerTable) -> LocalChoice:
    return LocalChoice(ENDPOINT_A, table.slot(ENDPOINT_A), POOL, "m")


@pytest.fixture
def b(table: WorkerTable) -> LocalChoice:
    return LocalChoice(ENDPOINT_B, table.slot(ENDPOINT_B), POOL, "m")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(50.0)


def test_counts_per_endpoint(table: WorkerTable, a: LocalChoice, b: LocalChoice) -> None:
    inflight = InFlight(table, ttl_s=10)
    inflight.add(1, a, "t")
    inflight.add(2, a, "t")
    inflight.add(3, b, "t")
    assert (inflight.load(ENDPOINT_A), inflight.load(ENDPOINT_B)) == (2, 1)
    assert table.inflight[a.slot] == 2  # the load the scorers read
    assert inflight.load("10.9.9.9:1") == 0
    assert inflight.per_endpoint() == {ENDPOINT_A: 2, ENDPOINT_B: 1}
    assert len(inflight) == 3
    assert 2 in inflight
    assert 4 not in inflight


def test_providers_carry_no_worker_load(table: WorkerTable, a: LocalChoice) -> None:
    inflight = InFlight(table, ttl_s=10)
    assignment = inflight.add(1, PROVIDER, "t")
    assert assignment.local is None
    assert assignment.destination == PROVIDER
    assert len(inflight) == 1
    assert inflight.per_endpoint() == {}
    assert inflight.release(1) is assignment
    assert table.inflight[a.slot] == 0


def test_release_once(table: WorkerTable, a: LocalChoice) -> None:
    inflight = InFlight(table, ttl_s=10)
    inflight.add(1, a, "team-a")
    assignment = inflight.release(1)
    assert assignment is not None
    assert assignment.destination == a
    assert assignment.local == a
    assert assignment.tenant == "team-a"
    assert inflight.release(1) is None
    assert inflight.load(ENDPOINT_A) == 0
    assert inflight.per_endpoint() == {}
    assert len(inflight) == 0


def test_the_release_listener_hears_every_local_request_once(
    table: WorkerTable, a: LocalChoice, clock: FakeClock
) -> None:
    heard: list[LocalChoice] = []
    inflight = InFlight(table, ttl_s=10, clock=clock, released=heard.append)
    inflight.add(1, a, "")
    inflight.add(2, PROVIDER, "")
    inflight.add(3, a, "")
    inflight.release(1)
    inflight.release(1)
    inflight.release(2)  # a provider: no engine queue to leave
    clock.now += 11
    inflight.expire()  # the TTL releases the third
    assert heard == [a, a]


def test_load_never_goes_negative(table: WorkerTable, a: LocalChoice) -> None:
    inflight = InFlight(table, ttl_s=10)
    inflight.add(1, a, "")
    table.inflight[a.slot] = 0  # e.g. reset elsewhere
    inflight.release(1)
    assert table.inflight[a.slot] == 0


def test_get_and_times(table: WorkerTable, a: LocalChoice, clock: FakeClock) -> None:
    inflight = InFlight(table, ttl_s=10, clock=clock)
    inflight.add(1, a, "")
    assignment = inflight.get(1)
    assert assignment is not None
    assert (assignment.picked_at, assignment.deadline) == (50.0, 60.0)
    assert assignment.first_token_at is None
    assert inflight.get(2) is None


def test_expire_after_ttl(
    table: WorkerTable, a: LocalChoice, b: LocalChoice, clock: FakeClock
) -> None:
    inflight = InFlight(table, ttl_s=10, clock=clock)
    inflight.add(1, a, "")
    clock.now += 5
    inflight.add(2, b, "")
    inflight.add(3, a, "")
    clock.now += 4.999
    assert inflight.expire() == []
    clock.now += 0.001
    assert inflight.expire() == [1]
    assert inflight.per_endpoint() == {ENDPOINT_A: 1, ENDPOINT_B: 1}
    clock.now += 5
    assert inflight.expire() == [2, 3]
    assert len(inflight) == 0
    assert inflight.per_endpoint() == {}


def test_expire_skips_released(table: WorkerTable, a: LocalChoice, clock: FakeClock) -> None:
    inflight = InFlight(table, ttl_s=1, clock=clock)
    inflight.add(1, a, "")
    inflight.add(2, a, "")
    inflight.release(1)
    clock.now += 2
    assert inflight.expire() == [2]
    assert inflight.load(ENDPOINT_A) == 0


def test_recent_remembers_released_providers_only(
    table: WorkerTable, a: LocalChoice, clock: FakeClock
) -> None:
    inflight = InFlight(table, ttl_s=100, recent_ttl_s=30, clock=clock)
    inflight.add(1, PROVIDER, "")
    inflight.add(2, a, "")
    inflight.add(4, PROVIDER, "")
    assert inflight.recent(1) == PROVIDER  # in flight
    assert inflight.recent(2) == a
    assert inflight.recent(3) is None
    inflight.release(1)
    clock.now += 10
    inflight.release(2)
    inflight.release(4)
    assert inflight.recent(1) == PROVIDER  # released, still remembered
    assert inflight.recent(2) is None  # a local request is forgotten once released
    clock.now += 20  # 30 s after releasing 1
    inflight.expire()
    assert inflight.recent(1) is None
    assert inflight.recent(4) == PROVIDER
    clock.now += 10
    inflight.expire()
    assert inflight.recent(4) is None


def test_expired_requests_are_remembered_too(table: WorkerTable, clock: FakeClock) -> None:
    inflight = InFlight(table, ttl_s=5, recent_ttl_s=30, clock=clock)
    inflight.add(1, PROVIDER, "")
    clock.now += 5
    assert inflight.expire() == [1]
    assert inflight.recent(1) == PROVIDER


def test_recent_is_bounded(
    table: WorkerTable, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inflight_module, "RECENT_LIMIT", 3)
    inflight = InFlight(table, ttl_s=5, clock=clock)
    for response_id in range(1, 6):
        inflight.add(response_id, PROVIDER, "")
        inflight.release(response_id)
    assert [inflight.recent(i) for i in range(1, 6)] == [None, None, PROVIDER, PROVIDER, PROVIDER]
