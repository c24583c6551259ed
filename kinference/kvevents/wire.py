"""vLLM's KV-cache event wire format, decoded.

A publisher (vLLM's `ZmqEventPublisher`, SGLang, Dynamo's mocker) sends ZMQ multipart
messages `(topic, seq, payload)`: `seq` is an 8-byte big-endian counter from 0 per
publisher, `payload` a msgpack `EventBatch` (msgspec structs). vLLM's versions differ in
layout, and all are accepted:

- the batch is an array `[ts, events, data_parallel_rank?]` (`array_like=True`, vLLM up to
  0.10, SGLang, Dynamo) or a map `{"ts", "events", "data_parallel_rank"}` (newer vLLM);
- each event is a tagged array `["BlockStored", block_hashes, parent_block_hash, token_ids,
  block_size, lora_id, medium, lora_name?, ...]` (older) or a tagged map with the tag under
  `"type"` (newer): `BlockStored`, `BlockRemoved` (`block_hashes`, `medium`),
  `AllBlocksCleared`;
- block hashes are 64-bit integers or bytes (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`).

The replay socket (ROUTER) answers a request of the start seq (8 bytes big-endian) with
`(seq, payload)` pairs and an end marker whose seq is -1. Anything else is `MalformedBatch`.
"""

from __future__ import annotations

import array
import math
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from kinference.kvevents.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EngineHash,
    Event,
    EventBatch,
)
from kinference.kvevents.steps import Budget, Steps, blocks_per_event, cost, finish, raw_cost, small
from kinference.kvevents.unpack import ERRORS, UNPACKED_PER_UNIT, unpack, unpack_steps

END_OF_REPLAY = -1
_SEQ_BYTES = 8
MAX_PAYLOAD_BYTES = 16 * 1024 * 1024  # refused undecoded: one step of a 1 MiB prompt is ~1.5 MB
FRAMING_BYTES = 64  # a frame's allowance beyond the largest payload decoded (ZMQ's size caps)
# An adapter's name seeds its blocks' identities (`kvcache.blocks.seed`, which keeps the last
# 256 it saw): a longer one is refused, not kept (256 names of 16 MiB would pin 4 GiB).
MAX_LORA_NAME_CHARS = 1024
_UINT32 = next(code for code in "IL" if array.array(code).itemsize == 4)  # "I" on all we run on
_SHOWN_CHARS = 64  # of a publisher's value quoted in a `MalformedBatch` message


class MalformedBatch(ValueError):
    """A message that is not a well-formed event batch; the message says what is wrong."""


def decode_seq(raw: bytes) -> int:
    if len(raw) != _SEQ_BYTES:
        raise MalformedBatch(f"sequence number of {len(raw)} bytes, expected 8")
    return int.from_bytes(raw, "big", signed=True)


def encode_seq(seq: int) -> bytes:
    return seq.to_bytes(_SEQ_BYTES, "big", signed=True)


def decode_batch(payload: bytes) -> EventBatch:
    """The batch in `payload`; raises `MalformedBatch` for anything else."""
    return finish(decode_steps(payload, Budget()))


def decode_steps(payload: bytes, budget: Budget) -> Steps[EventBatch]:
    """`decode_batch` in bounded steps (`kvevents.steps`): a payload larger than a step is
    unpacked a chunk at a time (msgpack's `Unpacker` resumes where the last chunk ended),
    and an event naming more than a step's blocks is checked and cut a window at a time:
    into events of consecutive blocks, each the next one's parent (the same blocks, in the
    same order, as the index applies them)."""
    size, chunk = len(payload), budget.per_step * UNPACKED_PER_UNIT
    if size > MAX_PAYLOAD_BYTES:
        raise MalformedBatch(f"payload of {size} bytes is over the limit")
    try:
        raw = unpack(payload) if size <= chunk else (yield from unpack_steps(payload, chunk))
    except ERRORS as exc:
        raise MalformedBatch(f"not msgpack: {exc}") from None
    ts, events, rank = _header(raw)
    if size <= chunk:  # a step's decoding: at once
        whole = tuple(map(decode_event, events))
        if budget.spend(size // UNPACKED_PER_UNIT):
            yield
        if small(size, budget.per_step) or all(cost(e) <= budget.per_step for e in whole):
            return EventBatch(ts, whole, rank)
        # Rare (a small payload naming more than a step's blocks): decoded again below,
        # its large events cut as a large payload's are.
    decoded: list[Event] = []
    for event in events:
        work = raw_cost(event)
        if work <= budget.per_step:
            decoded.append(decode_event(event))
        else:
            yield from _cut(event, decoded, budget)
        if budget.spend(work):
            yield
    return EventBatch(ts, tuple(decoded), rank)


def _header(raw: Any) -> tuple[float, list[Any], int | None]:
    """A batch's ts, events (undecoded) and data-parallel rank, checked."""
    if isinstance(raw, dict):
        ts, events, rank = raw.get("ts"), raw.get("events"), raw.get("data_parallel_rank")
    elif isinstance(raw, list) and 2 <= len(raw) <= 3:
        ts, events, rank = raw[0], raw[1], raw[2] if len(raw) == 3 else None
    else:
        raise MalformedBatch("batch is neither [ts, events, rank] nor a map")
    if not isinstance(ts, int | float) or isinstance(ts, bool) or not math.isfinite(ts):
        raise MalformedBatch("batch ts is not a number")
    if not isinstance(events, list):
        raise MalformedBatch("batch events is not an array")
    if rank is not None and not _is_int(rank):
        raise MalformedBatch("data_parallel_rank is not an integer")
    return float(ts), events, rank


def _cut(raw: Any, into: list[Event], budget: Budget) -> Steps[None]:
    """A large event decoded into `into` as events of at most a step's blocks each. The
    windows are cut from the end of the unpacked arrays, which shrink as they are cut (the
    16M values of a hostile batch are freed a window per step, not all in the last)."""
    fields = _fields(raw)
    tag, cut = fields.get("type"), list[Event]()
    hashes, tokens = fields.get("block_hashes"), fields.get("token_ids")
    if tag not in ("BlockRemoved", "BlockStored"):
        into.append(decode_event(raw))  # no blocks to cut (or refused)
        return
    if not isinstance(hashes, list):
        raise MalformedBatch("block_hashes is not an array of block hashes")
    if tag == "BlockRemoved":
        medium = _medium(fields.get("medium"))
        for start in reversed(range(0, len(hashes), blocks_per_event(0, budget.per_step))):
            cut.append(BlockRemoved(_hashes(hashes[start:]), medium))
            del hashes[start:]
            yield
        into.extend(reversed(cut))
        return
    if not isinstance(tokens, list):
        raise MalformedBatch("token_ids is not an array of token ids")
    head = _head(fields, len(hashes), len(tokens))
    size = head.size
    per = blocks_per_event(size, budget.per_step)
    for start in reversed(range(0, len(hashes), per)):
        window = _hashes(hashes[start:])
        ids = _token_ids(tokens[start * size :])
        if ids is None:
            raise MalformedBatch("token_ids is not an array of token ids")
        parent = hashes[start - 1] if start else head.parent  # checked in the next window
        cut.append(
            BlockStored(window, parent, ids, size, head.lora, head.medium, continues=start > 0)
        )
        del hashes[start:], tokens[start * size :]
        yield
    into.extend(reversed(cut))


def _fields(raw: Any) -> dict[str, Any]:
    """An event's fields by name, its tag under "type" (either layout)."""
    if isinstance(raw, list) and raw:
        names = _ARRAY_FIELDS.get(raw[0]) if isinstance(raw[0], str) else None
        if names is None:
            raise MalformedBatch(f"unknown event tag {_shown(raw[0])}")
        return {"type": raw[0], **dict(zip(names, raw[1:], strict=False))}
    if isinstance(raw, dict):
        return raw
    raise MalformedBatch("event is neither a tagged array nor a map")


def decode_event(raw: Any) -> Event:
    fields = _fields(raw)
    tag = fields.get("type")
    if tag == "BlockStored":
        return _stored(fields)
    if tag == "BlockRemoved":
        return BlockRemoved(_hashes(fields.get("block_hashes")), _medium(fields.get("medium")))
    if tag == "AllBlocksCleared":
        return AllBlocksCleared()
    raise MalformedBatch(f"unknown event tag {_shown(tag)}")


# Field order of the array form (msgspec's array_like: declaration order after the tag).
_ARRAY_FIELDS: dict[str, tuple[str, ...]] = {
    "BlockStored": (
        "block_hashes",
        "parent_block_hash",
        "token_ids",
        "block_size",
        "lora_id",
        "medium",
        "lora_name",
    ),
    "BlockRemoved": ("block_hashes", "medium"),
    "AllBlocksCleared": (),
}


def _stored(fields: dict[str, Any]) -> BlockStored:
    hashes = _hashes(fields.get("block_hashes"))
    tokens = _token_ids(fields.get("token_ids"))
    if tokens is None:
        raise MalformedBatch("token_ids is not an array of token ids")
    head = _head(fields, len(hashes), len(tokens))
    return BlockStored(hashes, head.parent, tokens, head.size, head.lora, head.medium)


class _Head(NamedTuple):
    """A `BlockStored`'s fields but its blocks, checked."""

    parent: EngineHash | None
    size: int
    lora: str | None
    medium: str | None


def _head(fields: dict[str, Any], blocks: int, tokens: int) -> _Head:
    parent = fields.get("parent_block_hash")
    if parent is not None and not _is_hash(parent):
        raise MalformedBatch("parent_block_hash is not a block hash")
    size = fields.get("block_size")
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        raise MalformedBatch("block_size is not a positive integer")
    if tokens != blocks * size:
        raise MalformedBatch(f"{tokens} token ids for {blocks} blocks of {size} tokens")
    lora = fields.get("lora_name")
    lora_id = fields.get("lora_id")
    if lora_id is not None and not _is_int(lora_id):
        raise MalformedBatch("lora_id is not an integer")
    if lora is None and lora_id is not None:
        lora = str(lora_id)
    if lora is not None and not isinstance(lora, str):
        raise MalformedBatch("lora_name is not a string")
    if lora is not None and len(lora) > MAX_LORA_NAME_CHARS:
        raise MalformedBatch(f"lora_name of {len(lora)} characters is over the limit")
    return _Head(parent, size, lora, _medium(fields.get("medium")))


def _hashes(raw: Any) -> tuple[EngineHash, ...]:
    if not isinstance(raw, list) or not _all_hashes(raw):
        raise MalformedBatch("block_hashes is not an array of block hashes")
    return tuple(raw)


def _all_hashes(values: list[Any]) -> bool:
    """Whether every value is a block hash; in C for the usual all-int or all-bytes arrays
    (a batch may name thousands of blocks)."""
    kinds = set(map(type, values))
    if kinds <= {int}:
        return True  # bools are not ints here: type(True) is bool
    if kinds == {bytes}:
        return min(map(len, values)) > 0 and max(map(len, values)) <= 64
    return all(_is_hash(h) for h in values)


def _medium(raw: Any) -> str | None:
    if raw is not None and not isinstance(raw, str):
        raise MalformedBatch("medium is not a string")
    return raw


def _token_ids(values: Any) -> npt.NDArray[np.uint32] | None:
    """The token ids as one array, if every value is one (0 <= id < 2^32); checked and
    converted in one pass in C by `array.array` (its unsigned 32-bit type refuses anything
    but an int in range: ~1 us for a block's 16 ids, where numpy's conversion and its min
    and max took ~15 us), and kept as the array the block identities are computed from. An
    array of bools only is refused, as numpy's conversion refused it (mixed with ints, a
    bool is the int it is)."""
    if not isinstance(values, list):
        return None
    try:
        packed = array.array(_UINT32, values)
    except (TypeError, OverflowError, ValueError):
        return None  # floats, strings, nested arrays, ids out of range
    if values and type(values[0]) is bool and all(type(v) is bool for v in values):
        return None
    return np.frombuffer(packed, dtype=np.uint32) if values else np.zeros(0, dtype=np.uint32)


def _shown(value: Any) -> str:
    """A publisher's value quoted in a message (logged): its start only."""
    text = repr(value) if not isinstance(value, list | dict) else type(value).__name__
    return text if len(text) <= _SHOWN_CHARS else f"{text[:_SHOWN_CHARS]}..."


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_hash(value: Any) -> bool:
    return _is_int(value) or (isinstance(value, bytes) and 0 < len(value) <= 64)
