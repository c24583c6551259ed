"""BodyStore: pending -> taken -> parked -> pulling -> released, TTLs, budgets and draining."""

from __future__ import annotations

import random
import sys

import pytest

from kinference.bodies import MAX_CHUNK_BYTES, Body, BodyStore, ByteBudget, Piece
from kinference.bodies.store import _COALESCE_BELOW
from kinference.errors import (
    AlreadyConsumed,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unavailable,
)
from tests.clock import FakeClock

TTL = 60.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(clock: FakeClock) -> BodyStore:
    return BodyStore(ByteBudget(1 << 30), max_body_bytes=64 << 20, ttl_s=TTL, clock=clock)


def push(store: BodyStore, *pieces: Piece, declared: int | None = None) -> tuple[int, Body]:
    upload = store.begin(declared, "req")
    for piece in pieces:
        upload.add(piece)
    return store.commit(upload)


def pulled(store: BodyStore, response_id: int) -> bytes:
    pull = store.open_pull(response_id)
    try:
        return b"".join(bytes(m) for m in pull.messages())
    finally:
        pull.close()


def test_full_life_of_a_body(store: BodyStore) -> None:
    assert store.idle
    upload = store.begin(5, "req")
    assert not store.idle  # a push is under way
    upload.add(b"hello")
    stream_id, body = store.commit(upload)
    assert stream_id != 0
    assert body.size == 5
    assert store.held_bodies == 1
    assert store.budget.used == 5
    assert not store.idle

    taken = store.take(stream_id)
    assert taken is body
    store.park(777, taken)
    assert store.held_bodies == 1
    assert store.budget.used == 5

    pull = store.open_pull(777)
    assert pull.total_bytes == 5
    assert store.held_bodies == 1  # being pulled still counts
    assert [bytes(m) for m in pull.messages()] == [b"hello"]
    assert store.budget.used == 0  # released as the messages went out
    pull.close()
    pull.close()  # idempotent
    assert store.held_bodies == 0
    assert store.budget.used == 0
    assert store.idle


def test_stream_ids_are_fresh_and_non_zero(store: BodyStore) -> None:
    ids = {push(store, b"{}")[0] for _ in range(200)}
    assert len(ids) == 200
    assert 0 not in ids


def test_new_stream_id_avoids_pending_and_consumed(
    store: BodyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kinference.bodies import ids

    draws = iter([11, 22, 11, 22, 33])
    monkeypatch.setattr(ids.os, "urandom", lambda size: next(draws).to_bytes(8, sys.byteorder))
    store.id_source = ids.IdSource(draw_bytes=8)  # one id a read: the reads are the draws
    assert push(store, b"a")[0] == 11
    assert push(store, b"b")[0] == 22
    store.take(11)  # consumed: remembered, so not reused
    assert push(store, b"c")[0] == 33


def test_take_rules(store: BodyStore, clock: FakeClock) -> None:
    with pytest.raises(InvalidArgument):
        store.take(0)
    with pytest.raises(NotFound):
        store.take(12345)
    stream_id, _ = push(store, b"x")
    store.take(stream_id)
    with pytest.raises(AlreadyConsumed):
        store.take(stream_id)
    # The tombstone lasts one TTL, then the id is simply unknown.
    clock.advance(TTL - 1)
    store.reap_expired_pending()
    with pytest.raises(AlreadyConsumed):
        store.take(stream_id)
    clock.advance(1)
    store.reap_expired_pending()
    with pytest.raises(NotFound):
        store.take(stream_id)


def test_begin_refuses_what_can_never_fit_and_while_draining(store: BodyStore) -> None:
    with pytest.raises(ResourceExhausted, match="declared length"):
        store.begin(store.max_body_bytes + 1)
    assert store.idle  # a refused push is not counted as under way
    store.begin(store.max_body_bytes)  # exactly the limit is fine
    store.draining = True
    with pytest.raises(Unavailable):
        store.begin(None)


def test_discard_returns_everything(store: BodyStore) -> None:
    upload = store.begin(None)
    upload.add(b"x" * 100)
    assert store.budget.used == 100
    store.discard(upload)
    assert store.budget.used == 0
    assert store.idle


def test_failed_commit_then_discard(store: BodyStore) -> None:
    upload = store.begin(10)
    upload.add(b"short")
    with pytest.raises(InvalidArgument):
        store.commit(upload)
    assert not store.idle  # still counted until the caller discards
    store.discard(upload)
    assert store.idle
    assert store.budget.used == 0


def test_unpicked_body_expires_after_ttl(store: BodyStore, clock: FakeClock) -> None:
    stream_id, body = push(store, b"x" * 10)
    clock.advance(TTL - 0.001)
    assert store.reap_expired_pending() == 0
    assert store.budget.used == 10
    clock.advance(0.001)
    assert store.reap_expired_pending() == 1
    assert store.budget.used == 0
    assert body.reserved == 0
    assert store.held_bodies == 0
    with pytest.raises(NotFound):  # expired, not consumed
        store.take(stream_id)


def test_ttl_counts_from_commit(store: BodyStore, clock: FakeClock) -> None:
    old, _ = push(store, b"a")
    clock.advance(30)
    young, _ = push(store, b"b")
    clock.advance(30)
    assert store.reap_expired_pending() == 1
    store.take(young)
    with pytest.raises(NotFound):
        store.take(old)


def test_unpulled_body_expires_after_ttl(store: BodyStore, clock: FakeClock) -> None:
    stream_id, _ = push(store, b"x" * 10)
    clock.advance(59)  # a Pick late in the window
    store.park(5, store.take(stream_id))
    clock.advance(59)  # the parked body has its own TTL
    assert store.reap_expired_parked() == []
    clock.advance(1)
    assert store.reap_expired_parked() == [5]
    assert store.budget.used == 0
    with pytest.raises(NotFound):
        store.open_pull(5)


def test_body_being_pulled_is_not_reaped(store: BodyStore, clock: FakeClock) -> None:
    stream_id, _ = push(store, b"abc", b"def")
    store.park(9, store.take(stream_id))
    pull = store.open_pull(9)
    clock.advance(10 * TTL)
    assert store.reap_expired_parked() == []
    assert store.reap_expired_pending() == 0
    assert b"".join(bytes(m) for m in pull.messages()) == b"abcdef"
    pull.close()
    assert store.budget.used == 0


def test_pull_is_single_shot(store: BodyStore) -> None:
    stream_id, _ = push(store, b"body")
    store.park(3, store.take(stream_id))
    assert pulled(store, 3) == b"body"
    with pytest.raises(NotFound):
        store.open_pull(3)


def test_abandoned_pull_releases_the_rest(store: BodyStore) -> None:
    pieces = [bytes([i]) * (_COALESCE_BELOW * 2) for i in range(4)]
    stream_id, _ = push(store, *pieces)
    total = sum(map(len, pieces))
    store.park(4, store.take(stream_id))
    pull = store.open_pull(4)
    messages = pull.messages()
    assert next(messages) is pieces[0]
    assert store.budget.used == total  # released on resume, not on yield
    assert next(messages) is pieces[1]
    assert store.budget.used == total - len(pieces[0])
    pull.close()  # the consumer went away mid-pull
    assert store.budget.used == 0
    assert store.held_bodies == 0
    assert store.idle


def test_drop_parked(store: BodyStore) -> None:
    stream_id, body = push(store, b"x" * 7)
    store.park(8, store.take(stream_id))
    assert store.drop_parked(8)
    assert not store.drop_parked(8)
    assert store.budget.used == 0
    assert body.pieces == []
    with pytest.raises(NotFound):
        store.open_pull(8)


def test_release_is_idempotent(store: BodyStore) -> None:
    _other_id, _ = push(store, b"y" * 5)  # stays held: an over-release would show
    stream_id, body = push(store, b"x" * 7)
    store.release(store.take(stream_id))
    store.release(body)
    assert store.budget.used == 5


def test_park_settles_a_rewritten_size(store: BodyStore) -> None:
    stream_id, body = push(store, b"0123456789")
    rewritten = store.take(stream_id).spliced([(0, 2, b"")])
    store.park(6, rewritten)
    assert store.budget.used == 8
    assert rewritten.reserved == 8
    assert pulled(store, 6) == b"23456789"
    assert store.budget.used == 0
    assert body.size == 10


def test_draining_store_becomes_idle_when_everything_is_gone(store: BodyStore) -> None:
    pending, _ = push(store, b"p")
    parked, _ = push(store, b"q")
    store.park(1, store.take(parked))
    upload = store.begin(None)
    store.draining = True
    assert not store.idle
    store.discard(upload)
    assert not store.idle
    store.release(store.take(pending))
    assert not store.idle
    assert pulled(store, 1) == b"q"
    assert store.idle


def make_pull_body(store: BodyStore, sizes: list[int]) -> tuple[list[bytes], int]:
    pieces = [random.Random(n).randbytes(n) for n in sizes]
    stream_id, _ = push(store, *pieces)
    response_id = 100
    store.park(response_id, store.take(stream_id))
    return pieces, response_id


@pytest.mark.parametrize(
    "sizes",
    [
        [1] * 5000,
        [100] * 3000,
        [MAX_CHUNK_BYTES] * 3,
        [10, MAX_CHUNK_BYTES, 10, MAX_CHUNK_BYTES - 10, 10],
        [_COALESCE_BELOW - 1, 2, MAX_CHUNK_BYTES, _COALESCE_BELOW, 1],
        [_COALESCE_BELOW - 1, MAX_CHUNK_BYTES - _COALESCE_BELOW + 1, 5],
        [],
    ],
    ids=["tiny", "small", "max", "mixed", "edges", "exact-fit", "empty"],
)
def test_pull_messages_are_the_body_in_order_and_at_most_1_mib(
    store: BodyStore, sizes: list[int]
) -> None:
    pieces, response_id = make_pull_body(store, sizes)
    body = b"".join(pieces)
    pull = store.open_pull(response_id)
    assert pull.total_bytes == len(body)
    out: list[bytes] = []
    for message in pull.messages():
        assert 0 < len(message) <= MAX_CHUNK_BYTES
        out.append(bytes(message))
        # Everything sent before this message has been released already.
        assert store.budget.used == len(body) - sum(map(len, out[:-1]))
    pull.close()
    assert b"".join(out) == body
    assert store.budget.used == 0
    if sizes and max(sizes) < _COALESCE_BELOW:
        # Small pieces are coalesced into messages of at least 64 KiB (but the last).
        assert all(len(m) >= _COALESCE_BELOW for m in out[:-1])
        assert len(out) <= len(body) // _COALESCE_BELOW + 1


def test_large_pieces_go_out_uncopied(store: BodyStore) -> None:
    pieces, response_id = make_pull_body(store, [_COALESCE_BELOW * 2, MAX_CHUNK_BYTES, 70_000])
    pull = store.open_pull(response_id)
    messages = list(pull.messages())
    pull.close()
    assert len(messages) == 3
    assert all(m is p for m, p in zip(messages, pieces, strict=True))


def test_a_spliced_piece_over_1_mib_goes_out_cut_into_views(store: BodyStore) -> None:
    # A rewrite's replacement (a translated member holding a big image) is one piece of any
    # size: every PullBody message stays within the spec's 1 MiB, and nothing is copied.
    stream_id, _ = push(store, b'{"a": 1, "b": 2}')
    replacement = random.Random(3).randbytes(3 * MAX_CHUNK_BYTES + 5)
    spliced = store.take(stream_id).spliced([(6, 7, replacement)])
    store.park(100, spliced)
    assert store.budget.used == spliced.size
    pull = store.open_pull(100)
    messages = list(pull.messages())
    pull.close()
    assert [len(m) for m in messages] == [6, *[MAX_CHUNK_BYTES] * 3, 5, 9]
    assert all(isinstance(m, memoryview) and m.obj is replacement for m in messages[1:5])
    assert b"".join(bytes(m) for m in messages) == b'{"a": ' + replacement + b', "b": 2}'
    assert store.budget.used == 0


def test_random_piece_sizes_pull_back_exactly(store: BodyStore) -> None:
    rng = random.Random(7)
    for round_ in range(20):
        sizes = [
            rng.choice([1, 50, 4096, 65535, 65536, 300_000, MAX_CHUNK_BYTES]) for _ in range(8)
        ]
        pieces = [rng.randbytes(n) for n in sizes]
        stream_id, _ = push(store, *pieces)
        store.park(round_ + 1, store.take(stream_id))
        assert pulled(store, round_ + 1) == b"".join(pieces)
        assert store.budget.used == 0


def test_reaping_many_bodies_at_staggered_times(store: BodyStore, clock: FakeClock) -> None:
    pending: list[tuple[float, int]] = []
    parked: list[tuple[float, int]] = []
    for step in range(40):
        stream_id, _ = push(store, b"x" * (step + 1))
        if step % 3 == 0:  # some are picked, leaving a tombstone and a parked body
            store.park(1000 + step, store.take(stream_id))
            parked.append((clock.now + TTL, 1000 + step))
        elif step % 3 == 1:  # some are picked and released at once
            store.release(store.take(stream_id))
        else:
            pending.append((clock.now + TTL, stream_id))
        clock.advance(1.5)
    for now in (clock.now, clock.now + 10, clock.now + 30, clock.now + 100):
        clock.now = now
        expected_pending = [sid for deadline, sid in pending if deadline <= now]
        expected_parked = [rid for deadline, rid in parked if deadline <= now]
        assert store.reap_expired_pending() == len(expected_pending)
        assert store.reap_expired_parked() == expected_parked
        pending = [(d, s) for d, s in pending if d > now]
        parked = [(d, r) for d, r in parked if d > now]
        assert store.held_bodies == len(pending) + len(parked)
    assert store.budget.used == 0
    assert store.idle
