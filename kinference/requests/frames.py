"""The frames the picker and its parse worker exchange over the worker's stdin and stdout.

A frame is an 8-byte header (two little-endian uint32: the length of a pickled
`(kind, data)` message, then of a raw payload), the message, then the payload (body bytes,
never pickled, so that they are written from the body's own pieces without a join). Both
ends are this package's code, so pickle is safe here: nothing a caller sends is unpickled
(bodies only ever travel as payload bytes).
"""

from __future__ import annotations

import asyncio
import pickle
import struct
from collections.abc import Sequence
from typing import IO, Any

from kinference.bodies import Piece

_HEADER = struct.Struct("<II")
# Bytes handed to the pipe before waiting for it to drain: one step of the loop copies at
# most this much (a chunk of the body is at most 1 MiB).
_DRAIN_EVERY = 1 << 20


def encode(kind: str, data: Any, payload_bytes: int = 0) -> bytes:
    message = pickle.dumps((kind, data), protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(message), payload_bytes) + message


async def send(
    writer: asyncio.StreamWriter, kind: str, data: Any, payload: Sequence[Piece] = ()
) -> None:
    """Write one frame, the payload piece by piece, waiting for the pipe between pieces."""
    writer.write(encode(kind, data, sum(len(piece) for piece in payload)))
    pending = 0
    for piece in payload:
        writer.write(piece)
        pending += len(piece)
        if pending >= _DRAIN_EVERY:
            await writer.drain()
            pending = 0
    await writer.drain()


async def receive(reader: asyncio.StreamReader) -> tuple[str, Any]:
    """One frame from the worker (its frames carry no payload); raises IncompleteReadError
    when the worker is gone."""
    sizes = await reader.readexactly(_HEADER.size)
    message_bytes, _payload_bytes = _HEADER.unpack(sizes)
    kind, data = pickle.loads(await reader.readexactly(message_bytes))
    return kind, data


def read(stream: IO[bytes]) -> tuple[str, Any, bytes] | None:
    """One frame, blocking (the worker's side); None at the end of the stream."""
    sizes = _read_exactly(stream, _HEADER.size)
    if sizes is None:
        return None
    message_bytes, payload_bytes = _HEADER.unpack(sizes)
    message = _read_exactly(stream, message_bytes)
    payload = _read_exactly(stream, payload_bytes)
    if message is None or payload is None:
        return None
    kind, data = pickle.loads(message)
    return kind, data, payload


def write(stream: IO[bytes], kind: str, data: Any) -> None:
    stream.write(encode(kind, data))
    stream.flush()


def _read_exactly(stream: IO[bytes], size: int) -> bytes | None:
    data = stream.read(size) if size else b""
    return data if len(data) == size else None
