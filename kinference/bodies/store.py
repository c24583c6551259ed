"""The process-local body store: push, hand to Pick, park for PullBody, reclaim by TTL."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

from kinference.bodies.body import MAX_CHUNK_BYTES, Body, ChunkObserver, Piece, Upload
from kinference.bodies.budget import ByteBudget
from kinference.bodies.ids import IdSource
from kinference.errors import (
    AlreadyConsumed,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unavailable,
)

V = TypeVar("V")

# Pieces smaller than this are coalesced into one PullBody message (bytes); larger pieces go
# out as they arrived, so the common case copies nothing.
_COALESCE_BELOW = 64 * 1024


@dataclass(slots=True)
class _Held:
    body: Body
    deadline: float  # monotonic seconds


class _IdsInUse:
    """Every stream id the store still answers for, so a new id never collides with one."""

    def __init__(self, *maps: Mapping[int, object]) -> None:
        self._maps = maps

    def __contains__(self, key: object) -> bool:
        return any(key in m for m in self._maps)


class BodyStore:
    """Holds bodies between PushBody, Pick and PullBody, within byte budgets and a TTL.

    States of one body: uploading (an `Upload`) -> pending under a stream id -> taken by Pick
    -> parked under a response id -> pulling -> released. Pending and parked bodies expire
    after `ttl_s`; a consumed stream id is remembered for `ttl_s` so a second Pick on it gets
    FAILED_PRECONDITION rather than NOT_FOUND.
    """

    def __init__(
        self,
        budget: ByteBudget,
        *,
        max_body_bytes: int,
        ttl_s: float,
        observer_factory: Callable[[], ChunkObserver] | None = None,
        observe_from_bytes: int = 0,
        defer_observing_from: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`defer_observing_from`: see `Upload`; the PushBody caller runs the work."""
        self._defer_from = defer_observing_from
        self.budget = budget
        self.max_body_bytes = max_body_bytes
        self.ttl_s = ttl_s
        self.draining = False
        self._observer_factory = observer_factory
        self._observe_from = observe_from_bytes
        self._clock = clock
        self.id_source = IdSource()  # stream ids here, response ids in the service
        self._pending: dict[int, _Held] = {}
        self._consumed: dict[int, float] = {}  # stream id -> monotonic expiry, seconds
        self._parked: dict[int, _Held] = {}
        self._pulls = 0
        self._uploads = 0
        self._ids = _IdsInUse(self._pending, self._consumed)

    @property
    def held_bodies(self) -> int:
        """Bodies waiting for Pick, waiting for PullBody, or being pulled."""
        return len(self._pending) + len(self._parked) + self._pulls

    def is_parked(self, response_id: int) -> bool:
        return response_id in self._parked

    def is_pending(self, stream_id: int) -> bool:
        """A body waits for the Pick of `stream_id`."""
        return stream_id in self._pending

    @property
    def idle(self) -> bool:
        """Nothing is being pushed and no body is held: a draining instance may stop."""
        return self._uploads == 0 and self.held_bodies == 0

    def begin(self, declared_length: int | None, client_request_id: str = "") -> Upload:
        """Start receiving a PushBody; refuses at once what could never fit."""
        if self.draining:
            raise Unavailable("instance is draining; push to another instance")
        if declared_length is not None and declared_length > self.max_body_bytes:
            raise ResourceExhausted(
                f"declared length {declared_length} exceeds the "
                f"{self.max_body_bytes}-byte request limit"
            )
        self._uploads += 1
        return Upload(
            self.budget,
            max_body_bytes=self.max_body_bytes,
            declared_length=declared_length,
            client_request_id=client_request_id,
            observer_factory=self._observer_factory,
            observe_from_bytes=self._observe_from,
            defer_observing_from=self._defer_from,
        )

    def commit(self, upload: Upload) -> tuple[int, Body]:
        """Store a completely received body; returns its new stream id."""
        body = upload.finish()
        self._uploads -= 1
        stream_id = self.id_source.new_id(self._ids)
        self._pending[stream_id] = _Held(body, self._clock() + self.ttl_s)
        return stream_id, body

    def discard(self, upload: Upload) -> None:
        """Drop a push that failed or was reset."""
        upload.discard()
        self._uploads -= 1

    def take(self, stream_id: int) -> Body:
        """Hand a pending body to Pick; each stream id can be taken once."""
        if stream_id == 0:
            raise InvalidArgument("body_stream_id 0 names no body")
        held = self._pending.pop(stream_id, None)
        if held is None:
            if stream_id in self._consumed:
                raise AlreadyConsumed(f"stream {stream_id} was consumed by an earlier Pick")
            raise NotFound(f"stream {stream_id} is unknown, expired or released")
        self._consumed[stream_id] = self._clock() + self.ttl_s
        return held.body

    def park(self, response_id: int, body: Body) -> None:
        """Keep a picked body for its single PullBody, settling a rewrite's size change."""
        self.budget.release(body.reserved)
        self.budget.reserve_unchecked(body.size)
        body.reserved = body.size
        self._parked[response_id] = _Held(body, self._clock() + self.ttl_s)

    def release(self, body: Body) -> None:
        """Return a body's bytes to the budget (a Pick that chose no destination)."""
        self.budget.release(body.reserved)
        body.reserved = 0
        body.pieces = []

    def drop_parked(self, response_id: int) -> bool:
        """Release a body still waiting for PullBody (Abort); False if none is parked."""
        held = self._parked.pop(response_id, None)
        if held is None:
            return False
        self.release(held.body)
        return True

    def open_pull(self, response_id: int) -> Pull:
        """Start the single PullBody of a response id; a second one gets NOT_FOUND."""
        held = self._parked.pop(response_id, None)
        if held is None:
            raise NotFound(f"no body awaits PullBody for response {response_id}")
        self._pulls += 1
        return Pull(self, held.body)

    def reap_expired_pending(self) -> int:
        """Reclaim bodies no Pick came for within the TTL; returns how many."""
        now = self._clock()
        expired = _expired(self._pending, now, _held_deadline)
        for stream_id in expired:
            self.release(self._pending.pop(stream_id).body)
        for stream_id in _expired(self._consumed, now, _same):
            del self._consumed[stream_id]
        return len(expired)

    def reap_expired_parked(self) -> list[int]:
        """Reclaim picked bodies no PullBody came for; returns their response ids."""
        expired = _expired(self._parked, self._clock(), _held_deadline)
        for response_id in expired:
            self.release(self._parked.pop(response_id).body)
        return expired

    def _pull_done(self, body: Body) -> None:
        self._pulls -= 1
        self.release(body)


def _expired(entries: Mapping[int, V], now: float, deadline: Callable[[V], float]) -> list[int]:
    """Keys whose deadline passed. Every entry gets the same TTL, so insertion order is
    deadline order and the walk stops at the first live entry: O(expired), not O(held)."""
    expired = []
    for key, entry in entries.items():
        if deadline(entry) > now:
            break
        expired.append(key)
    return expired


def _held_deadline(entry: _Held) -> float:
    return entry.deadline


def _same(value: float) -> float:
    return value


class Pull:
    """One PullBody: yields messages of at most 1 MiB and frees each piece once it is sent."""

    def __init__(self, store: BodyStore, body: Body) -> None:
        self._store = store
        self._body = body
        self._closed = False

    @property
    def total_bytes(self) -> int:
        return self._body.size

    def messages(self) -> Iterator[Piece]:
        """Chunk payloads in order; the bytes of a yielded message are released on resume."""
        pieces, budget = self._body.pieces, self._store.budget
        index = 0
        while index < len(pieces):
            group_end, group_bytes = index, 0
            while group_end < len(pieces) and _fits(group_bytes, len(pieces[group_end])):
                group_bytes += len(pieces[group_end])
                group_end += 1
            group_end = max(group_end, index + 1)
            group = pieces[index:group_end]
            if len(group) > 1:
                yield b"".join(group)
            else:  # a piece over 1 MiB (a spliced replacement, a translation) goes out cut
                yield from _cut(group[0])
            nbytes = sum(len(p) for p in group)
            for i in range(index, group_end):
                pieces[i] = b""  # drop the reference: a slow pull holds only what is unsent
            budget.release(nbytes)
            self._body.reserved -= nbytes
            index = group_end

    def close(self) -> None:
        """Release the rest of the body, whether the pull finished or was abandoned."""
        if not self._closed:
            self._closed = True
            self._store._pull_done(self._body)


def _cut(piece: Piece) -> Iterator[Piece]:
    """`piece` as messages of at most `MAX_CHUNK_BYTES` (views of it: nothing copied)."""
    if len(piece) <= MAX_CHUNK_BYTES:
        yield piece
        return
    view = memoryview(piece)
    for start in range(0, len(view), MAX_CHUNK_BYTES):
        yield view[start : start + MAX_CHUNK_BYTES]


def _fits(group_bytes: int, piece_bytes: int) -> bool:
    """Whether a piece joins the message being built: only small pieces are ever joined."""
    if group_bytes == 0:
        return True
    return piece_bytes < _COALESCE_BELOW and group_bytes < _COALESCE_BELOW
