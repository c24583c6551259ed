"""Hand-written wire framing for BodyChunk, the one message that carries body bytes.

BodyChunk is a single `bytes chunk = 1` field, so its encoding is `0x0A || varint(len) ||
bytes` (the spec keeps it that way on purpose). Decoding it by hand copies each received
chunk once, instead of once into a protobuf message and again out of it; encoding it by hand
sends a held chunk without building a message around it. Anything that is not the canonical
one-field form falls back to the protobuf runtime, so any valid encoding is accepted.

A chunk of at least the heap's mmap threshold is not copied out of its message at all: the
payload is kept as a view of the received bytes, and sent back as those very bytes (their
framing is the one `encode_chunk` would write). Each copy of such a chunk is a fresh
mapping that the kernel fills page by page (`kinference.heap`), so two copies per chunk
cost a 16 MiB round trip ~8,000 page faults, ~8 ms on a 2-core host (docs/benchmarks.md).
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from kinference.bodies import Piece, backing
from kinference.heap import MMAP_THRESHOLD_BYTES
from kinference.v1 import picker_pb2 as pb

_TAG = 0x0A  # field 1, wire type 2 (length-delimited)
_VARINT_MAX_BYTES = 5  # a length prefix never needs more; longer goes to protobuf
# Payloads this large stay views of their message (smaller ones are copied from the heap,
# cheaply, and stay `bytes` for the small-body paths that want them).
VIEW_FROM_BYTES = MMAP_THRESHOLD_BYTES


class MalformedChunk:
    """Returned by `decode_chunk` for bytes that are not a BodyChunk (the handler rejects)."""

    __slots__ = ()


MALFORMED = MalformedChunk()


def decode_chunk(raw: bytes) -> Piece | MalformedChunk:
    """The payload of a serialized BodyChunk (a view of `raw` when it is large)."""
    if raw and raw[0] == _TAG:
        length, header = _read_varint(raw, 1)
        if header > 0 and header + length == len(raw):
            return memoryview(raw)[header:] if length >= VIEW_FROM_BYTES else raw[header:]
    try:
        return pb.BodyChunk.FromString(raw).chunk
    except DecodeError:
        return MALFORMED


def encode_chunk(payload: Piece) -> bytes:
    """A serialized BodyChunk holding `payload`."""
    if not payload:
        return b""  # proto3: an empty bytes field is not written at all
    header = bytes((_TAG,)) + _varint(len(payload))
    message = backing(payload)
    if message is not None and message[1] == len(header) and message[0].startswith(header):
        return message[0]  # the message it arrived in: the same bytes, not copied
    return b"".join((header, payload))


def _read_varint(raw: bytes, pos: int) -> tuple[int, int]:
    """(value, position after it), or (0, -1) when the varint is cut short or too long."""
    value, shift = 0, 0
    for index in range(pos, min(len(raw), pos + _VARINT_MAX_BYTES)):
        byte = raw[index]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, index + 1
        shift += 7
    return 0, -1


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
