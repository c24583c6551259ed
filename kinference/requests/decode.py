"""json.loads that never holds the GIL for long, whatever the text.

CPython's C decoder holds the GIL for a whole call: one dense megabyte of JSON (`[{},{},…]`)
is ~30 ms during which no other thread, the event loop included, runs. Parsing moves off the
loop into a thread (`requests/offload.py`), which helps only if the thread lets go of the
GIL: so a text the C decoder would take long over is decoded by the standard library's
pure-Python decoder instead, which the interpreter interrupts every switch interval (5 ms).
Both decoders accept the same documents and give the same values; the C one stays the
fast path for every ordinary request.
"""

from __future__ import annotations

import json
import json.decoder
import json.scanner
from typing import Any

# Estimated C decoder cost: ~10 ns a byte plus ~70 ns a value (measured on one core of the
# 2-core CI machine); above this many nanoseconds the interruptible decoder takes over.
_C_BUDGET_NS = 5_000_000
_NS_PER_BYTE = 10
_NS_PER_VALUE = 70
_ALWAYS_C_BYTES = 16 * 1024  # a text this short is never worth the estimate


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
