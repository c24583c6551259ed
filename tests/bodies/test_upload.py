"""Upload: the per-chunk, per-request, declared-length and server-wide limits of a PushBody."""

from __future__ import annotations

import pytest

from kinference.bodies import MAX_CHUNK_BYTES, ByteBudget, Piece, Upload
from kinference.errors import InvalidArgument, ResourceExhausted


class Recorder:
    """A chunk observer that remembers what it was fed."""

    def __init__(self) -> None:
        self.fed: list[bytes] = []

    def feed(self, data: Piece) -> None:
        self.fed.append(bytes(data))


def upload(
    budget: ByteBudget | None = None,
    *,
    max_body_bytes: int = 1 << 30,
    declared: int | None = None,
    **kwargs: object,
) -> Upload:
    return Upload(
        budget or ByteBudget(1 << 40),
        max_body_bytes=max_body_bytes,
        declared_length=declared,
        client_request_id="req-1",
        **kwargs,  # type: ignore[arg-type]
    )


def test_pieces_are_kept_as_received() -> None:
    budget = ByteBudget(100)
    up = upload(budget)
    first, second = b"hello ", memoryview(b"world")
    up.add(first)
    up.add(second)
    assert up.size == 11
    assert budget.used == 11
    body = up.finish()
    assert body.pieces[0] is first
    assert body.pieces[1] is second
    assert body.size == 11
    assert body.reserved == 11
    assert body.client_request_id == "req-1"
    assert budget.used == 11  # the body holds the bytes now


def test_empty_chunks_are_ignored() -> None:
    budget = ByteBudget(10)
    up = upload(budget, declared=0)
    up.add(b"")
    body = up.finish()
    assert body.size == 0
    assert body.pieces == []
    assert budget.used == 0


def test_chunk_of_exactly_1_mib_is_fine() -> None:
    up = upload()
    up.add(bytes(MAX_CHUNK_BYTES))
    assert up.size == MAX_CHUNK_BYTES


def test_oversized_chunk_fails_even_when_the_body_fits() -> None:
    budget = ByteBudget(1 << 30)
    up = upload(budget, declared=MAX_CHUNK_BYTES + 1)
    with pytest.raises(ResourceExhausted, match="chunk"):
        up.add(bytes(MAX_CHUNK_BYTES + 1))
    assert budget.used == 0
    assert up.size == 0


def test_per_request_limit() -> None:
    budget = ByteBudget(1000)
    up = upload(budget, max_body_bytes=10)
    up.add(b"x" * 6)
    with pytest.raises(ResourceExhausted, match="10-byte request limit"):
        up.add(b"x" * 5)
    assert budget.used == 6  # the refused chunk was never held
    up.add(b"x" * 4)  # exactly at the limit
    assert up.size == 10
    up.discard()
    assert budget.used == 0


def test_server_wide_budget() -> None:
    budget = ByteBudget(8)
    budget.reserve(5)  # another body
    up = upload(budget)
    up.add(b"abc")
    with pytest.raises(ResourceExhausted, match="server-wide"):
        up.add(b"d")
    assert budget.used == 8
    assert up.size == 3
    up.discard()
    assert budget.used == 5


def test_longer_than_declared_fails_at_once() -> None:
    budget = ByteBudget(100)
    up = upload(budget, declared=4)
    up.add(b"abc")
    with pytest.raises(InvalidArgument, match="declared length 4"):
        up.add(b"de")
    assert budget.used == 3
    up.discard()
    assert budget.used == 0


def test_shorter_than_declared_fails_at_finish() -> None:
    budget = ByteBudget(100)
    up = upload(budget, declared=5)
    up.add(b"abc")
    with pytest.raises(InvalidArgument, match="received 3 bytes but kinference-declared-length"):
        up.finish()
    up.discard()  # the caller discards a failed push: nothing is left behind
    assert budget.used == 0


def test_declared_length_matching_exactly() -> None:
    up = upload(declared=5)
    up.add(b"ab")
    up.add(b"cde")
    assert up.finish().size == 5


def test_discard_leaves_nothing_and_is_idempotent() -> None:
    budget = ByteBudget(100)
    up = upload(budget)
    up.add(b"x" * 40)
    up.discard()
    up.discard()
    assert budget.used == 0
    assert up.size == 0


def test_discard_after_finish_releases_nothing_twice() -> None:
    budget = ByteBudget(100)
    up = upload(budget)
    up.add(b"x" * 40)
    body = up.finish()
    up.discard()
    assert budget.used == 40
    assert body.reserved == 40


def test_observer_starts_lazily_past_the_threshold_and_sees_everything_once() -> None:
    made: list[Recorder] = []

    def factory() -> Recorder:
        made.append(Recorder())
        return made[-1]

    up = upload(observer_factory=factory, observe_from_bytes=10)
    up.add(b"aaaa")
    up.add(b"bbbbbb")  # 10 bytes: at the threshold, not past it
    assert made == []
    up.add(b"cc")  # 12 bytes: the observer starts and catches up
    assert len(made) == 1
    assert made[0].fed == [b"aaaa", b"bbbbbb", b"cc"]
    up.add(b"")
    up.add(b"dd")
    assert made[0].fed == [b"aaaa", b"bbbbbb", b"cc", b"dd"]
    body = up.finish()
    assert body.observer is made[0]


def test_small_body_is_never_observed() -> None:
    made: list[Recorder] = []

    def factory() -> Recorder:
        made.append(Recorder())
        return made[-1]

    up = upload(observer_factory=factory, observe_from_bytes=100)
    up.add(b"x" * 100)
    assert up.finish().observer is None
    assert made == []


def test_threshold_zero_observes_from_the_first_byte() -> None:
    recorder = Recorder()
    up = upload(observer_factory=lambda: recorder, observe_from_bytes=0)
    up.add(b"")
    up.add(b"a")
    up.add(b"b")
    assert recorder.fed == [b"a", b"b"]
    assert up.finish().observer is recorder


def test_refused_chunk_is_not_observed() -> None:
    recorder = Recorder()
    up = upload(ByteBudget(3), observer_factory=lambda: recorder)
    up.add(b"ab")
    with pytest.raises(ResourceExhausted):
        up.add(b"cd")
    assert recorder.fed == [b"ab"]
