"""Hand-written BodyChunk framing: byte-identical to protobuf, and protobuf's answer otherwise."""

from __future__ import annotations

import random

import pytest
from google.protobuf.message import DecodeError

from kinference.api.framing import (
    MALFORMED,
    VIEW_FROM_BYTES,
    MalformedChunk,
    decode_chunk,
    encode_chunk,
)
from kinference.v1 import picker_pb2 as pb

SIZES = [0, 1, 127, 128, 16383, 16384, 1 << 20, (1 << 20) + 64]


def protobuf_decode(raw: bytes) -> bytes | MalformedChunk:
    try:
        return pb.BodyChunk.FromString(raw).chunk
    except DecodeError:
        return MALFORMED


@pytest.mark.parametrize("size", SIZES)
def test_encode_is_byte_identical_to_protobuf(size: int) -> None:
    payload = random.Random(size).randbytes(size)
    encoded = encode_chunk(payload)
    assert encoded == pb.BodyChunk(chunk=payload).SerializeToString()
    assert encode_chunk(memoryview(payload)) == encoded
    assert encode_chunk(bytearray(payload)) == encoded


@pytest.mark.parametrize("size", SIZES)
def test_round_trip(size: int) -> None:
    payload = random.Random(size).randbytes(size)
    assert decode_chunk(encode_chunk(payload)) == payload
    assert decode_chunk(pb.BodyChunk(chunk=payload).SerializeToString()) == payload
    assert pb.BodyChunk.FromString(encode_chunk(payload)).chunk == payload


def test_header_lengths() -> None:
    assert encode_chunk(b"x") == b"\x0a\x01x"
    assert encode_chunk(b"x" * 127)[:2] == b"\x0a\x7f"
    assert encode_chunk(b"x" * 128)[:3] == b"\x0a\x80\x01"
    assert encode_chunk(b"x" * 16384)[:4] == b"\x0a\x80\x80\x01"
    assert encode_chunk(b"") == b""


def test_decoded_payload_is_bytes() -> None:
    assert type(decode_chunk(b"\x0a\x03abc")) is bytes
    assert type(decode_chunk(b"")) is bytes


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"", b""),  # an empty chunk: the field is not written at all
        (b"\x0a\x00", b""),  # ...or written empty
        (b"\x0a\x01a\x0a\x01b", b"b"),  # repeated field: the last one wins
        (b"\x0a\x02ab\x12\x01z", b"ab"),  # an unknown field is skipped
        (b"\x12\x01z\x0a\x02ab", b"ab"),  # ...wherever it is
        (b"\x08\x05\x0a\x01c", b"c"),  # an unknown varint field
        (b"\x0a\x80\x00", b""),  # an overlong length varint (non-canonical, valid)
        (b"\x0a\x81\x00a", b"a"),
        (b"\x0a\x83\x80\x80\x00abc", b"abc"),
    ],
)
def test_non_canonical_encodings(raw: bytes, expected: bytes) -> None:
    assert protobuf_decode(raw) == expected
    assert decode_chunk(raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        b"\x0a",  # no length
        b"\x0a\x05abc",  # cut short
        b"\x0a\x81",  # varint cut short
        b"\x0a\x81\x00",  # overlong varint, payload missing
        b"\xff",
        b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # a length past 2**64
        b"\x0b\x01a",  # wire type 3 (start group) with no end
        b"\x0f",  # wire type 7 does not exist
        b"\x00\x01",  # field number 0
        b"\x0a\x01",
        b"\x0a\x01a\x0a",
    ],
)
def test_garbage_is_malformed(raw: bytes) -> None:
    assert protobuf_decode(raw) is MALFORMED
    assert decode_chunk(raw) is MALFORMED


def varint(value: int, extra: int = 0) -> bytes:
    """`value` as a varint, padded with `extra` redundant continuation bytes."""
    out = []
    while True:
        out.append(value & 0x7F)
        value >>= 7
        if not value:
            break
    out = [b | 0x80 for b in out[:-1]] + [out[-1]]
    if extra:
        out[-1] |= 0x80
        out += [0x80] * (extra - 1) + [0]
    return bytes(out)


def test_fuzz_agrees_with_protobuf() -> None:
    rng = random.Random(2024)
    for _ in range(20000):
        if rng.random() < 0.3:
            raw = rng.randbytes(rng.randrange(0, 12))
        else:
            payload = rng.randbytes(rng.randrange(0, 6))
            claimed = max(len(payload) + rng.choice([0, 0, 0, 1, -1]), 0)
            # Length prefixes of up to 5 bytes: upb refuses longer ones (see the report).
            prefix = varint(claimed, extra=rng.choice([0, 0, 0, 1, 4]))
            tail = rng.choice([b"", b"", b"\x12\x00", b"\x0a\x01z", rng.randbytes(2)])
            raw = b"\x0a" + prefix + payload + tail
        expected = protobuf_decode(raw)
        got = decode_chunk(raw)
        if expected is MALFORMED:
            assert got is MALFORMED, raw
        else:
            assert got == expected, raw


def test_a_large_payload_stays_a_view_of_its_message() -> None:
    payload = random.Random(1).randbytes(VIEW_FROM_BYTES)
    raw = pb.BodyChunk(chunk=payload).SerializeToString()
    got = decode_chunk(raw)
    assert isinstance(got, memoryview)
    assert got.obj is raw
    assert got == payload
    smaller = pb.BodyChunk(chunk=payload[1:]).SerializeToString()
    assert type(decode_chunk(smaller)) is bytes


def test_a_received_large_chunk_goes_back_out_as_its_message_uncopied() -> None:
    raw = pb.BodyChunk(chunk=random.Random(2).randbytes(1 << 20)).SerializeToString()
    assert encode_chunk(decode_chunk(raw)) is raw  # type: ignore[arg-type]


def test_views_that_are_not_a_whole_message_are_framed_anew() -> None:
    payload = random.Random(3).randbytes(VIEW_FROM_BYTES + 10)
    view = decode_chunk(pb.BodyChunk(chunk=payload).SerializeToString())
    assert isinstance(view, memoryview)
    header = len(encode_chunk(payload)) - len(payload)
    look_alike = memoryview(b"\x0b" * header + payload)[header:]  # same length, no header
    for piece, expected in [
        (view[:-1], payload[:-1]),  # a head of the message's payload
        (view[1:], payload[1:]),  # a tail, shorter than its header says
        (look_alike, payload),
        (memoryview(bytearray(b"\x0a" + payload))[1:], payload),
    ]:
        encoded = encode_chunk(piece)
        assert encoded == pb.BodyChunk(chunk=expected).SerializeToString()
