"""Body: a body held as its received pieces; spans read across pieces, splices share memory."""

from __future__ import annotations

import itertools
import random

import pytest

from kinference.bodies import Body, Piece, backing


def split(data: bytes, rng: random.Random, *, views: bool = False) -> list[Piece]:
    """`data` cut at random places into non-empty pieces (optionally memoryviews)."""
    cuts = sorted(rng.sample(range(1, len(data)), min(rng.randrange(0, 8), len(data) - 1)))
    bounds = [0, *cuts, len(data)]
    pieces: list[Piece] = [data[a:b] for a, b in itertools.pairwise(bounds)]
    if views:
        pieces = [memoryview(p) for p in pieces]
    return pieces


def joined(body: Body) -> bytes:
    return b"".join(bytes(p) for p in body.pieces)


def test_size_and_fields() -> None:
    body = Body([b"ab", memoryview(b"cde")], reserved=5, client_request_id="r-1")
    assert body.size == 5
    assert body.reserved == 5
    assert body.client_request_id == "r-1"
    assert body.observer is None


@pytest.mark.parametrize("views", [False, True])
def test_read_span_matches_slicing_for_every_span(views: bool) -> None:
    rng = random.Random(1234)
    for _ in range(40):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
        body = Body(split(data, rng, views=views), reserved=len(data))
        for start in range(-2, len(data) + 3):
            for end in range(start - 1, len(data) + 3):
                got = body.read_span(start, end)
                assert isinstance(got, bytes)
                assert got == data[max(start, 0) : max(min(end, len(data)), 0)]


def test_read_span_of_an_empty_body() -> None:
    body = Body([], reserved=0)
    assert body.size == 0
    assert body.read_span(0, 10) == b""


def reference_splice(data: bytes, edits: list[tuple[int, int, bytes]]) -> bytes:
    out, cursor = b"", 0
    for start, end, replacement in sorted(edits, key=lambda edit: edit[0]):
        out += data[cursor:start] + replacement
        cursor = end
    return out + data[cursor:]


def random_edits(size: int, rng: random.Random) -> list[tuple[int, int, bytes]]:
    """Non-overlapping edits (insertions, deletions, replacements), in random order."""
    points = sorted(rng.choices(range(size + 1), k=2 * rng.randrange(0, 4)))
    edits = []
    for start, end in zip(points[::2], points[1::2], strict=True):
        replacement = rng.choice([b"", b"X", b"<new bytes>"])
        edits.append((start, end, replacement))
    rng.shuffle(edits)
    return edits


@pytest.mark.parametrize("views", [False, True])
def test_spliced_matches_a_reference_splice(views: bool) -> None:
    rng = random.Random(99)
    for _ in range(300):
        data = bytes(rng.randrange(97, 123) for _ in range(rng.randrange(1, 50)))
        body = Body(split(data, rng, views=views), reserved=len(data), client_request_id="c")
        edits = random_edits(len(data), rng)
        result = body.spliced(edits)
        expected = reference_splice(data, edits)
        assert joined(result) == expected
        assert result.size == len(expected)
        assert result.read_span(0, result.size) == expected
        assert all(len(p) > 0 for p in result.pieces)
        assert result.reserved == body.reserved  # the caller settles the difference
        assert result.client_request_id == "c"
        assert joined(body) == data  # the original is untouched


def test_spliced_shares_untouched_memory() -> None:
    first, second = b"0123456789", b"abcdefghij"
    body = Body([first, second], reserved=20)
    result = body.spliced([(3, 5, b"XY")])
    assert joined(result) == b"012XY56789abcdefghij"
    assert result.pieces[-1] is second  # a whole untouched piece is the same object
    for piece in result.pieces[:-1]:
        if isinstance(piece, memoryview):
            assert piece.obj is first  # a partial piece is a view, not a copy


def test_spliced_edit_at_both_ends() -> None:
    body = Body([b"abc", b"def"], reserved=6)
    assert joined(body.spliced([(6, 6, b"!"), (0, 0, b"^")])) == b"^abcdef!"
    assert joined(body.spliced([(0, 6, b"")])) == b""
    assert body.spliced([(0, 6, b"")]).size == 0
    assert joined(body.spliced([])) == b"abcdef"


def test_backing_finds_the_bytes_a_view_is_the_tail_of() -> None:
    message = b"\x0a\x03abc"
    assert backing(memoryview(message)[2:]) == (message, 2)
    assert backing(message) is None  # bytes: nothing behind it
    assert backing(memoryview(message)) is None  # the whole object: no tail
    assert backing(memoryview(message)[2:4]) is None  # not a tail
    assert backing(memoryview(bytearray(message))[2:]) is None  # not bytes


def test_backing_matches_by_content() -> None:
    """A view whose bytes equal the tail is answered with the tail: same bytes either way."""
    data = b"abab"
    found = backing(memoryview(data)[:2])
    assert found == (data, 2)
    assert data[found[1] :] == b"ab"
