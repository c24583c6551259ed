"""A chat's messages over 1 MiB decoded once per conversation, not once per turn.

Messages too large to be parsed at Pick (`LargeValue`) are decoded on the tokenizer thread
from their span's bytes, with the GIL held the whole time: at 1 MiB the join of the body's
pieces (~0.8 ms) and msgspec's decode (~2.9 ms) were two of the three C calls the event
loop's stalls over 10 ms waited for (docs/benchmarks.md, h93). But every turn resends the
whole history: its messages' JSON begins with the previous turn's up to that turn's last
message's end, and conversations on one system prompt begin with the same first message.

So `DecodedHistory` keeps, at such a message's end (a `_Node`: its offset in the span, the
span's `TAIL_BYTES` before it), the messages decoded up to there, named by the SHA-256 of
the span's bytes up to there. A span whose bytes up to a node's offset have that digest
takes the node's messages (the same objects: nothing mutates them, the template renders
copies) and decodes only what follows, as an array of its own (`[` and the rest: the new
messages nest as deep as in the whole). The digest is taken over the body's pieces as they
are (no join), and hashlib lets go of the GIL while it hashes (~0.7 ms a MiB on a core, the
loop free meanwhile). The messages are the whole span's (a test holds them equal to its
decode); a span that is not a valid continuation, or that msgspec refuses, gives None and
the caller decodes it whole as before (its value or error unchanged).

Nodes are left at the last two messages' ends a span adds (its next turn, or a retry of the
last message), and, for a span whose lead (its first `LEAD_BYTES`, a system prompt's or a
conversation's start) was seen before but matched no node, at its first message's end too
(found by msgspec's scan of the span's values, ~1 ms a MiB: paid once a system prompt, and
never by a lead seen once). Bounded in nodes and in the bytes of JSON their messages were
decoded from (each message counted once, however many nodes share it), least recently used
dropped. Used from the tokenizer's one thread (or with its work lock held).
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import msgspec

from kinference.bodies import Body

LEAD_BYTES = 256  # the span's start naming its lineage (a system prompt, a conversation)
TAIL_BYTES = 16  # bytes before a node's offset compared before its digest is computed
MAX_NODES = 256
MAX_BYTES = 32 * 1024 * 1024  # JSON bytes of the kept messages, each message once
_SLOT_BYTES = 8  # a node's tuple slot, counted with the messages' bytes
_WHITE = b" \t\n\r"  # JSON's whitespace
_SPACE = re.compile(rb"[ \t\n\r]*")
_COMMA = re.compile(rb"[ \t\n\r]*,[ \t\n\r]*")
_CLOSE = re.compile(rb"[ \t\n\r]*\]")

_Key = tuple[bytes, int, bytes]  # lineage, offset, digest of the span's bytes to the offset


@dataclass(frozen=True, slots=True)
class _Node:
    tail: bytes  # the span's TAIL_BYTES before its offset
    messages: tuple[Any, ...]  # the span's messages up to its offset, decoded


class _Digest:
    """SHA-256 of a span's bytes up to growing offsets (a smaller one starts over)."""

    def __init__(self, body: Body, start: int) -> None:
        self._body, self._start = body, start
        self._hash, self.done = hashlib.sha256(), 0

    def at(self, offset: int, rest: bytes = b"", base: int = 0) -> bytes:
        """From the body's pieces, or from `rest` (the span's bytes from `base` on)."""
        if offset < self.done:
            self._hash, self.done = hashlib.sha256(), 0
        if rest and self.done >= base:
            self._hash.update(memoryview(rest)[self.done - base : offset - base])
        else:
            for piece in self._body.views(self._start + self.done, self._start + offset):
                self._hash.update(piece)  # pieces >= 2 KiB are hashed without the GIL
        self.done = offset
        return self._hash.copy().digest()

    def save(self) -> tuple[int, Any]:
        return self.done, self._hash.copy()

    def restore(self, saved: tuple[int, Any]) -> None:
        self.done, self._hash = saved[0], saved[1].copy()


class DecodedHistory:
    """Decoded messages at message ends, by lineage, offset and digest (see above)."""

    def __init__(self, max_nodes: int = MAX_NODES, max_bytes: int = MAX_BYTES) -> None:
        self.max_nodes, self.max_bytes = max_nodes, max_bytes
        self._nodes: OrderedDict[_Key, _Node] = OrderedDict()
        self._tails: dict[bytes, dict[int, dict[bytes, int]]] = {}  # lineage, offset: tails
        self._held: dict[int, list[int]] = {}  # id of a kept message -> [nodes, its bytes]
        self._bytes = 0  # of the kept messages, each once, and the nodes' slots
        self.decoded_bytes = 0  # JSON bytes decoded (the spans' new parts)
        self.reused = 0  # spans that took a node's messages

    def __len__(self) -> int:
        return len(self._nodes)

    @property
    def held_bytes(self) -> int:
        return self._bytes

    def messages(self, body: Body, start: int, end: int) -> list[Any] | None:
        """The JSON array in body[start:end] decoded, taking kept messages where its bytes
        begin as a node's span did; None if not decoded here (see the module's doc)."""
        if end - start <= LEAD_BYTES:
            return None
        lead = hashlib.sha256(body.read_span(start, start + LEAD_BYTES)).digest()
        digest = _Digest(body, start)
        found = self._find(lead, body, start, end, digest)
        if found is None:
            return self._whole(lead, body.read_span(start, end), digest)
        offset, node = found
        return self._extend(lead, offset, node, body.read_span(start + offset, end), digest)

    def _find(
        self, lead: bytes, body: Body, start: int, end: int, digest: _Digest
    ) -> tuple[int, _Node] | None:
        """The node furthest into the span whose bytes up to it are the span's (`digest`
        left there)."""
        best: tuple[_Key, _Node, tuple[int, Any]] | None = None
        at = self._tails.get(lead, {})
        for offset in sorted(o for o in at if o < end - start):
            if body.read_span(start + offset - TAIL_BYTES, start + offset) not in at[offset]:
                continue
            key = (lead, offset, digest.at(offset))
            node = self._nodes.get(key)
            if node is not None:
                best = (key, node, digest.save())
        if best is None:
            return None
        key, node, saved = best
        self._nodes.move_to_end(key)
        digest.restore(saved)
        return key[1], node

    def _extend(
        self, lead: bytes, base: int, node: _Node, rest: bytes, digest: _Digest
    ) -> list[Any] | None:
        """The node's messages and those `rest` (the span from the node's offset `base`
        on) adds, decoded as an array of their own."""
        if _CLOSE.fullmatch(rest):  # the same messages again (a retried turn)
            self.reused += 1
            return list(node.messages)
        comma = _COMMA.match(rest)
        if comma is None:
            return None
        array = b"[" + rest[comma.end() :]  # its byte i is rest's comma.end() + i - 1
        added = _decode(array)
        if not added:  # `, ]` (a trailing comma) is no continuation; decoded whole: refused
            return None
        self.decoded_bytes += len(array)
        self.reused += 1
        messages = (*node.messages, *added)
        ends = _spans(array)
        if len(ends) != len(added):  # not where `_spans` looked: keep nothing new
            return list(messages)
        sizes = {id(m): e - s for m, (s, e) in zip(added, ends, strict=True)}
        for n in range(max(len(added) - 2, 0), len(added)):  # the last two messages' ends
            offset = base + comma.end() - 1 + ends[n][1]
            tail = rest[offset - base - TAIL_BYTES : offset - base]
            if len(tail) == TAIL_BYTES:
                key = (lead, offset, digest.at(offset, rest, base))
                self._put(key, tail, messages[: len(node.messages) + n + 1], sizes)
        return list(messages)

    def _whole(self, lead: bytes, raw: bytes, digest: _Digest) -> list[Any] | None:
        """The span decoded whole (as before), nodes left for the spans after it: at its
        last message's end, and, if its lead was seen, at its first and last but one."""
        messages = _decode(raw)
        if not messages:
            return messages
        self.decoded_bytes += len(raw)
        held, last = tuple(messages), len(messages) - 1
        if lead in self._tails:
            try:
                ends = _spans(raw)
            except (msgspec.MsgspecError, RecursionError):  # as the decode did: not expected
                return messages
            if len(ends) != len(held):
                return messages
            sizes = {id(m): e - s for m, (s, e) in zip(held, ends, strict=True)}
            picked = sorted({0, max(last - 1, 0), last})
        else:  # the span's bytes counted on its last message (never held without it)
            ends = [(0, 0)] * last + [(0, _last_end(raw))]
            sizes, picked = {id(held[last]): ends[last][1]}, [last]
        for n in picked:
            offset = ends[n][1]
            if offset >= TAIL_BYTES:
                key = (lead, offset, digest.at(offset, raw))
                self._put(key, raw[offset - TAIL_BYTES : offset], held[: n + 1], sizes)
        return messages

    def _put(
        self, key: _Key, tail: bytes, messages: tuple[Any, ...], sizes: dict[int, int]
    ) -> None:
        if key in self._nodes:
            self._nodes.move_to_end(key)
            return
        cost = _SLOT_BYTES * len(messages)
        for message in messages:
            held = self._held.get(id(message))
            if held is None:
                size = sizes.get(id(message), 0)
                self._held[id(message)] = [1, size]
                cost += size
            else:
                held[0] += 1
        self._nodes[key] = _Node(tail, messages)
        tails = self._tails.setdefault(key[0], {}).setdefault(key[1], {})
        tails[tail] = tails.get(tail, 0) + 1
        self._bytes += cost
        while len(self._nodes) > self.max_nodes or self._bytes > self.max_bytes:
            self._drop(*self._nodes.popitem(last=False))

    def _drop(self, key: _Key, node: _Node) -> None:
        self._bytes -= _SLOT_BYTES * len(node.messages)
        for message in node.messages:
            held = self._held[id(message)]
            held[0] -= 1
            if not held[0]:
                self._bytes -= held[1]
                del self._held[id(message)]
        lineage = self._tails[key[0]]
        tails = lineage[key[1]]
        tails[node.tail] -= 1
        if not tails[node.tail]:
            del tails[node.tail]
            if not tails:
                del lineage[key[1]]
                if not lineage:
                    del self._tails[key[0]]


def _decode(raw: bytes) -> list[Any] | None:
    """msgspec's value of `raw` if it is an array; None where it refuses (the caller then
    decodes the span as before: `json.loads` decides) or it is no array."""
    try:
        value = msgspec.json.decode(raw)
    except (msgspec.MsgspecError, RecursionError):
        return None
    return value if isinstance(value, list) else None


def _spans(array: bytes) -> list[tuple[int, int]]:
    """Where each value of a valid JSON array starts and ends in it."""
    spans, position = [], array.index(b"[") + 1  # after whitespace only: it is valid
    for n, value in enumerate(msgspec.json.decode(array, type=list[msgspec.Raw])):
        found = (_COMMA if n else _SPACE).match(array, position)
        position = found.end() if found is not None else position
        spans.append((position, position + len(value)))
        position += len(value)
    return spans


def _last_end(array: bytes) -> int:
    """Where the last value of a valid, non-empty JSON array ends in it."""
    end = array.rindex(b"]")
    while array[end - 1] in _WHITE:
        end -= 1
    return end
