"""json.loads that never holds the GIL for long, whatever the text.

CPython's C decoder holds the GIL for a whole call: one dense megabyte of JSON (`[{},{},…]`)
is ~30 ms during which no other thread, the event loop included, runs. Parsing moves off the
loop into a thread (`requests/offload.py`), which helps only if the thread lets go of the
GIL: so a text the C decoder would take long over is decoded by the standard library's
pure-Python decoder instead, which the interpreter interrupts every switch interval (5 ms).
Both decoders accept the same documents and give the same values; the C one stays the
fast path for every ordinary request.

Freeing is the other half: dropping the last reference to a decoded value frees its whole
tree in one C call (a list of 340,000 empty objects, one dense megabyte: ~16 ms with the GIL
held). `discard` takes a value apart a slice at a time instead, so a parse that validates a
member and drops it never stops the other threads for longer than one slice.
"""

from __future__ import annotations

import json
import json.decoder
import json.scanner
from typing import Any

# Estimated C decoder cost: ~10 ns a byte plus ~70 ns a value (measured on one core of the
# 2-core CI machine); above this many nanoseconds the interruptible decoder takes over.
_C_BUDGET_NS = 2_000_000
_NS_PER_BYTE = 10
_NS_PER_VALUE = 70
_ALWAYS_C_BYTES = 16 * 1024  # a text this short is never worth the estimate
_SLICE = 2048  # children freed by one C call in `discard`: ~0.1 ms of dealloc


class _InterruptibleDecoder(json.JSONDecoder):
    """The pure-Python scanner: slower, but each value is a few bytecodes, not one C call."""

    def __init__(self) -> None:
        super().__init__()
        self.parse_string = json.decoder.py_scanstring  # type: ignore[attr-defined]
        self.scan_once = json.scanner.py_make_scanner(self)  # type: ignore[attr-defined]


_INTERRUPTIBLE = _InterruptibleDecoder()


def loads(text: str) -> Any:
    """`json.loads(text)`, by the decoder that keeps the GIL free (raises what it raises)."""
    if len(text) <= _ALWAYS_C_BYTES or c_cost_ns(text) <= _C_BUDGET_NS:
        return json.loads(text)
    return _INTERRUPTIBLE.decode(text)


def c_cost_ns(text: str) -> int:
    """What the C decoder would take, roughly: every value is at most one separator."""
    values = text.count(",") + text.count("[") + text.count("{") + text.count(":")
    return _NS_PER_BYTE * len(text) + _NS_PER_VALUE * values


def discard(value: object) -> None:
    """Empty a decoded value in place, `_SLICE` children per C call, so that dropping it
    afterwards frees nothing big at once.

    Non-empty containers among the children are emptied the same way rather than freed
    whole, so no single deallocation frees more than one slice of scalars and empty
    containers (dicts give up their items one by one: their keys go with them).
    """
    pending = [value]
    while pending:
        node = pending.pop()
        while node:
            if isinstance(node, dict):
                part = [node.popitem()[1] for _ in range(min(_SLICE, len(node)))]
            elif isinstance(node, list):
                part = node[-_SLICE:]
                del node[-_SLICE:]
            else:
                break
            pending.extend(item for item in part if isinstance(item, list | dict) and item)
            del part  # frees this slice's scalars and empty containers
