"""InFlight: per-endpoint load between Pick and the final report, Abort or TTL."""

from __future__ import annotations

from kinference.routing import Candidate, InFlight, PoolRef

POOL = PoolRef("default", "chat")
A = Candidate("10.0.0.5:8000", POOL)
B = Candidate("10.0.0.6:8000", POOL)


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def test_counts_per_endpoint() -> None:
    inflight = InFlight(ttl_s=10)
    inflight.add(1, A, "m")
    inflight.add(2, A, "m")
    inflight.add(3, B, "m")
    assert (inflight.load(A.endpoint), inflight.load(B.endpoint)) == (2, 1)
    assert inflight.load("10.9.9.9:1") == 0
    assert inflight.per_endpoint() == {A.endpoint: 2, B.endpoint: 1}
    assert len(inflight) == 3
    assert 2 in inflight
    assert 4 not in inflight


def test_release_once() -> None:
    inflight = InFlight(ttl_s=10)
    inflight.add(1, A, "m")
    assignment = inflight.release(1)
    assert assignment is not None
    assert assignment.candidate == A
    assert assignment.model == "m"
    assert inflight.release(1) is None
    assert inflight.load(A.endpoint) == 0
    assert inflight.per_endpoint() == {}
    assert len(inflight) == 0


def test_get_and_times() -> None:
    clock = Clock()
    inflight = InFlight(ttl_s=10, clock=clock)
    inflight.add(1, A, "m")
    assignment = inflight.get(1)
    assert assignment is not None
    assert (assignment.picked_at, assignment.deadline) == (50.0, 60.0)
    assert assignment.first_token_at is None
    assert inflight.get(2) is None


def test_expire_after_ttl() -> None:
    clock = Clock()
    inflight = InFlight(ttl_s=10, clock=clock)
    inflight.add(1, A, "m")
    clock.now += 5
    inflight.add(2, B, "m")
    inflight.add(3, A, "m")
    clock.now += 4.999
    assert inflight.expire() == []
    clock.now += 0.001
    assert inflight.expire() == [1]
    assert inflight.per_endpoint() == {A.endpoint: 1, B.endpoint: 1}
    clock.now += 5
    assert inflight.expire() == [2, 3]
    assert len(inflight) == 0
    assert inflight.per_endpoint() == {}


def test_expire_skips_released() -> None:
    clock = Clock()
    inflight = InFlight(ttl_s=1, clock=clock)
    inflight.add(1, A, "m")
    inflight.add(2, A, "m")
    inflight.release(1)
    clock.now += 2
    assert inflight.expire() == [2]
    assert inflight.load(A.endpoint) == 0
