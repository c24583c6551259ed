"""A msgpack payload unpacked in bounded steps (`kvevents.steps`), for `wire.decode_steps`.

msgpack's `Unpacker` resumes where the last chunk fed ended (its stack of half-built arrays
is kept), so a 16 MiB payload is unpacked a chunk per step at the cost of unpacking it at
once. Errors are msgpack's own; `wire` makes them `MalformedBatch`.
"""

from __future__ import annotations

from typing import Any

import msgpack

from kinference.kvevents.steps import Steps

UNPACKED_PER_UNIT = 4  # payload bytes per unit of work: a byte is ~10 ns, a quarter unit
ERRORS = (
    ValueError,  # msgpack.ExtraData and its limits among them
    TypeError,
    msgpack.OutOfData,  # truncated
    msgpack.FormatError,
    msgpack.StackError,
)


def unpack(payload: bytes) -> Any:
    """The payload's msgpack value, at once; raises one of `ERRORS` for anything else."""
    return msgpack.unpackb(payload, raw=False, strict_map_key=False, use_list=True)


def unpack_steps(payload: bytes, chunk: int) -> Steps[Any]:
    """The payload's msgpack value, `chunk` bytes unpacked per step (at once if it is no
    larger); raises one of `ERRORS` for anything else."""
    if len(payload) <= chunk:
        return unpack(payload)
    unpacker = msgpack.Unpacker(
        raw=False, strict_map_key=False, use_list=True, max_buffer_size=len(payload)
    )
    view = memoryview(payload)
    for start in range(0, len(payload), chunk):
        unpacker.feed(view[start : start + chunk])
        try:
            value = unpacker.unpack()
        except msgpack.OutOfData:
            yield
            continue
        if unpacker.tell() != len(payload):
            raise msgpack.ExtraData(value, b"")
        return value
    raise msgpack.OutOfData("truncated")
