"""Helpers shared by the request-parsing tests: chunked feeding and outcome comparison."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

from kinference.bodies import Body, ByteBudget, Piece, Upload
from kinference.requests import InferenceRequest, JsonScanner, MalformedRequest, parse_request

# Chunk sizes every document is fed in; None is the whole document as one chunk.
CHUNKINGS: tuple[int | None, ...] = (1, 2, 3, 7, 64, None)

Outcome = tuple[object, ...]


def pieces_of(data: bytes, size: int | None, *, views: bool = False) -> list[Piece]:
    """`data` in consecutive pieces of `size` bytes (the last may be shorter)."""
    if size is None or not data:
        out: list[Piece] = [data] if data else []
    else:
        out = [data[i : i + size] for i in range(0, len(data), size)]
    return [memoryview(p) for p in out] if views else out


def scanner_for(pieces: list[Piece]) -> JsonScanner:
    scanner = JsonScanner()
    for piece in pieces:
        scanner.feed(piece)
    return scanner


def outcome(body: Body) -> Outcome:
    """What Pick sees: ("ok", model, shape, stream) or ("malformed", reason)."""
    try:
        request = parse_request(body)
    except MalformedRequest as exc:
        return ("malformed", str(exc))
    return ("ok", request.model, request.shape, request.stream)


def whole(data: bytes) -> Outcome:
    """The outcome of a small body nobody scanned: parsed whole at Pick."""
    return outcome(Body([data] if data else [], reserved=len(data)))


def scanned(data: bytes, size: int | None, *, views: bool = False) -> Outcome:
    """The outcome of a body scanned chunk by chunk while it arrived."""
    pieces = pieces_of(data, size, views=views)
    return outcome(Body(pieces, reserved=len(data), observer=scanner_for(pieces)))


def uploaded(data: bytes, size: int | None, observe_from: int) -> Outcome:
    """The outcome of a body received through an Upload that scans past `observe_from`."""
    return outcome(uploaded_body(data, size, observe_from))


def kind(result: Outcome) -> Outcome:
    """An outcome without the reason text: paths may word the same refusal differently."""
    return result if result[0] == "ok" else ("malformed",)


def all_scanned(data: bytes) -> Iterator[tuple[str, Outcome]]:
    """Every scanned way of receiving `data`, labelled for assertion messages."""
    for size in CHUNKINGS:
        yield f"chunks of {size}", scanned(data, size)
    yield "memoryview chunks of 5", scanned(data, 5, views=True)
    yield "upload scanning from byte 0", uploaded(data, 3, 0)
    yield "upload scanning from the middle", uploaded(data, 3, len(data) // 2)


def whole_body(data: bytes) -> Body:
    """A small body as Pick sees it when nobody scanned the upload."""
    return Body([data] if data else [], reserved=len(data))


def scanned_body(data: bytes, size: int | None = 7) -> Body:
    """A body scanned chunk by chunk while it arrived."""
    pieces = pieces_of(data, size)
    return Body(pieces, reserved=len(data), observer=scanner_for(pieces))


def uploaded_body(data: bytes, chunk: int | None = 1 << 20, observe_from: int = 256 * 1024) -> Body:
    """A body received as the server receives it: scanned past `observe_from` as it arrives."""
    upload = Upload(
        ByteBudget(1 << 40),
        max_body_bytes=1 << 40,
        declared_length=len(data),
        client_request_id="",
        observer_factory=JsonScanner,
        observe_from_bytes=observe_from,
    )
    for piece in pieces_of(data, chunk):
        upload.add(piece)
    return upload.finish()


def parse_both(doc: dict[str, Any]) -> InferenceRequest:
    """`doc` parsed whole and scanned, which must agree on everything but the spans."""
    data = json.dumps(doc).encode()
    request = parse_request(whole_body(data))
    other = parse_request(scanned_body(data, 5))
    assert dataclasses.replace(other, fields=request.fields) == request
    return request
