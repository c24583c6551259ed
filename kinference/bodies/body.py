"""A request body held as the chunks it arrived in, and the upload that assembles it."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from typing import Protocol

from kinference.bodies.budget import ByteBudget
from kinference.errors import InvalidArgument, ResourceExhausted

Piece = bytes | memoryview

# The spec's per-message decode limit: one chunk over it fails the push even when the whole
# body fits the budget.
MAX_CHUNK_BYTES = 1 << 20
# Chunks smaller than this (bytes) are copied into a shared block instead of kept as
# received: a bytes object costs ~40 bytes besides its payload, so a body pushed as 2-byte
# chunks would cost ~25x what the budget counts. Larger chunks are kept as they are.
# The first few small chunks of an upload are kept as received all the same, so the usual
# body of one or a few chunks is never copied (and a rewrite finds it as one bytes object).
SMALL_CHUNK_BYTES = 4096
SMALL_CHUNKS_KEPT = 16
# A block of small chunks is sealed once it holds this many bytes; under the 64 KiB below
# which PullBody coalesces pieces, so the blocks still go out in messages of >= 64 KiB.
BLOCK_BYTES = 32 * 1024


def backing(piece: Piece) -> tuple[bytes, int] | None:
    """The bytes object `piece` is the tail of, and where in it the piece starts, when
    `piece` is a view of one (a large chunk kept inside the message it arrived in, see
    `api.framing`); None otherwise. The match is by content (one memcmp), so the answer is
    right whatever made the view: searching or sending that object costs no copy."""
    if not isinstance(piece, memoryview) or type(piece.obj) is not bytes:
        return None
    whole: bytes = piece.obj
    start = len(whole) - piece.nbytes
    return (whole, start) if start > 0 and whole.endswith(piece) else None


class ChunkObserver(Protocol):
    """Sees every chunk of an upload once, in order, as it arrives (e.g. a JSON scanner)."""

    def feed(self, data: Piece) -> None: ...


class Observation:
    """Chunks an upload's observer still has to see, handed to the caller to run off the
    event loop (`Upload(defer_observing_from=...)`); run it before the next `add`."""

    __slots__ = ("observer", "pieces")

    def __init__(self, observer: ChunkObserver, pieces: list[Piece]) -> None:
        self.observer = observer
        self.pieces = pieces

    def run(self) -> None:
        for piece in self.pieces:
            self.observer.feed(piece)


class Body:
    """A complete body: the received pieces, never joined, and what they cost the budget.

    Holding the received objects instead of one joined buffer keeps a 100 MiB body at 1x
    its size in memory and makes the hand-back in PullBody copy-free.
    """

    __slots__ = (
        "_offsets",
        "client_request_id",
        "observer",
        "pieces",
        "request_path",
        "reserved",
        "size",
    )

    def __init__(
        self,
        pieces: list[Piece],
        *,
        reserved: int,
        observer: ChunkObserver | None = None,
        client_request_id: str = "",
    ) -> None:
        self.pieces = pieces
        self.size = sum(len(p) for p in pieces)
        self.reserved = reserved
        self.observer = observer
        self.client_request_id = client_request_id
        self.request_path = ""  # the client's path, when the caller sent it (a shape hint)
        self._offsets: list[int] | None = None

    def read_span(self, start: int, end: int) -> bytes:
        """The bytes in [start, end) of the body, joined from the pieces that hold them."""
        start, end = max(start, 0), min(end, self.size)
        if start >= end:
            return b""
        offsets = self._piece_offsets()
        index = bisect_right(offsets, start) - 1
        parts: list[Piece] = []
        while index < len(self.pieces) and offsets[index] < end:
            piece, base = self.pieces[index], offsets[index]
            parts.append(piece[max(start - base, 0) : min(end - base, len(piece))])
            index += 1
        return b"".join(parts)

    def spliced(self, edits: Sequence[tuple[int, int, bytes]]) -> Body:
        """A body with each (start, end, replacement) edit applied; untouched bytes are shared.

        Edits must not overlap. The result reuses this body's memory, so only the replacement
        bytes are new; `reserved` moves with it and the caller settles the size difference.
        """
        pieces: list[Piece] = []
        cursor = 0
        for start, end, replacement in sorted(edits, key=lambda edit: edit[0]):
            pieces.extend(self.views(cursor, start))
            if replacement:
                pieces.append(replacement)
            cursor = end
        pieces.extend(self.views(cursor, self.size))
        # The upload's scanner described the old byte positions: it does not come along.
        return Body(pieces, reserved=self.reserved, client_request_id=self.client_request_id)

    def views(self, start: int, end: int) -> list[Piece]:
        """The bytes in [start, end) as the pieces (or views of them) that hold them: no copy."""
        offsets = self._piece_offsets()
        out: list[Piece] = []
        index = max(bisect_right(offsets, start) - 1, 0)
        while index < len(self.pieces) and offsets[index] < end:
            piece, base = self.pieces[index], offsets[index]
            lo, hi = max(start - base, 0), min(end - base, len(piece))
            if hi > lo:
                out.append(piece if (lo, hi) == (0, len(piece)) else memoryview(piece)[lo:hi])
            index += 1
        return out

    def _piece_offsets(self) -> list[int]:
        if self._offsets is None:
            offsets, total = [], 0
            for piece in self.pieces:
                offsets.append(total)
                total += len(piece)
            self._offsets = offsets
        return self._offsets


class Upload:
    """A PushBody in progress: enforces the chunk, per-request and server-wide budgets."""

    def __init__(
        self,
        budget: ByteBudget,
        *,
        max_body_bytes: int,
        declared_length: int | None,
        client_request_id: str,
        observer_factory: Callable[[], ChunkObserver] | None = None,
        observe_from_bytes: int = 0,
        defer_observing_from: int | None = None,
    ) -> None:
        """`defer_observing_from`: chunks of at least this many bytes (together) are not
        fed to the observer here but returned by `add` as an `Observation` to run."""
        self._defer_from = defer_observing_from
        self._budget = budget
        self._max_body_bytes = max_body_bytes
        self._declared = declared_length
        self._observer: ChunkObserver | None = None
        self._observer_factory = observer_factory
        self._observe_from = observe_from_bytes
        self._client_request_id = client_request_id
        self._pieces: list[Piece] = []
        self._block = bytearray()  # small chunks not yet sealed into a piece
        self._small_kept = 0  # small chunks kept as received so far
        self.size = 0
        self._reserved = 0

    def add(self, piece: Piece) -> Observation | None:
        """Take one received chunk; raises before holding anything over a limit. Returns
        the observer's work when it is deferred (see `__init__`)."""
        nbytes = len(piece)
        if nbytes > MAX_CHUNK_BYTES:
            raise ResourceExhausted(f"chunk of {nbytes} bytes exceeds {MAX_CHUNK_BYTES}")
        if self.size + nbytes > self._max_body_bytes:
            raise ResourceExhausted(f"body exceeds the {self._max_body_bytes}-byte request limit")
        if self._declared is not None and self.size + nbytes > self._declared:
            raise InvalidArgument(f"body is longer than its declared length {self._declared}")
        if nbytes == 0:
            return None
        self._budget.reserve(nbytes)
        self._reserved += nbytes
        self._hold(piece)
        self.size += nbytes
        if self._observer is not None:
            return self._observe(self._observer, [piece])
        if self._observer_factory is not None and self.size > self._observe_from:
            # Small bodies are parsed whole at Pick; a large one is watched from here on.
            self._observer = self._observer_factory()
            return self._observe(self._observer, self._pieces_so_far())
        return None

    def _observe(self, observer: ChunkObserver, pieces: list[Piece]) -> Observation | None:
        work = Observation(observer, pieces)
        if self._defer_from is not None and sum(len(p) for p in pieces) >= self._defer_from:
            return work
        work.run()
        return None

    def _pieces_so_far(self) -> list[Piece]:
        """What was received so far, in order (the open block as a copy)."""
        return [*self._pieces, bytes(self._block)] if self._block else list(self._pieces)

    def _hold(self, piece: Piece) -> None:
        """Keep a chunk: a large one as received, a small one copied into the open block."""
        small = len(piece) < SMALL_CHUNK_BYTES
        if not small or self._small_kept < SMALL_CHUNKS_KEPT:
            self._small_kept += small
            self._seal()
            self._pieces.append(piece)
            return
        self._block += piece
        if len(self._block) >= BLOCK_BYTES:
            self._seal()

    def _seal(self) -> None:
        """Turn the open block into a piece (the bytearray is never resized afterwards)."""
        if self._block:
            self._pieces.append(memoryview(self._block))
            self._block = bytearray()

    def finish(self) -> Body:
        """The complete body after a clean half-close; the declared length must match."""
        if self._declared is not None and self.size != self._declared:
            raise InvalidArgument(
                f"received {self.size} bytes but kinference-declared-length is {self._declared}"
            )
        self._seal()
        body = Body(
            self._pieces,
            reserved=self._reserved,
            observer=self._observer,
            client_request_id=self._client_request_id,
        )
        self._pieces, self._reserved = [], 0
        return body

    def discard(self) -> None:
        """Drop whatever was received (reset, error, timeout): nothing is left behind."""
        self._budget.release(self._reserved)
        self._pieces, self._reserved, self.size = [], 0, 0
        self._block = bytearray()
