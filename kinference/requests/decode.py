"""JSON decoding for the request parser.

`strict_loads` decodes a body's bytes with msgspec's decoder: on the routing benchmark's
bodies ~1.7x as fast as `json.loads` (a 48 KB chat: ~38 against ~63 µs), and no `str` copy
first. It accepts strict JSON (RFC 8259) only, and where it accepts, its value is
`json.loads`'s (a property test holds them equal); it refuses (`Refused`) invalid UTF-8 or
JSON and what `json.loads` takes beyond RFC 8259 (NaN, Infinity, numbers past the float
range, lone surrogates), and nesting deeper than it recurses: the parser then asks
`json.loads`, so what a body parses to, and the error a malformed one gets, are what they
were with `json.loads` alone.

`loads` is `json.loads` (the C decoder). When parsing ran in a thread beside the event loop,
a costly text went to the pure-Python decoder, which lets go of the GIL at every switch
interval; big bodies are now parsed in a worker process (`requests/offload.py`), where the
C decoder may hold its own GIL as long as it needs, and the loop parses only bodies up to
32 KiB (a few ms at the densest), so that decoder is gone.

`discard` takes a decoded value apart a slice at a time, so that dropping it never frees a
huge tree in one C call (a list of 340,000 empty objects, one dense megabyte: ~16 ms). The
worker parse validates unread members with it; it keeps any process that frees such a value
responsive.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

_SLICE = 2048  # children freed by one C call in `discard`: ~0.1 ms of dealloc


class Refused(Exception):
    """`strict_loads` did not decode the text: `json.loads` decides."""


def strict_loads(raw: bytes) -> Any:
    """The value of the JSON text `raw` (UTF-8), or `Refused` (see the module's doc)."""
    try:
        return msgspec.json.decode(raw)
    except (msgspec.MsgspecError, RecursionError):
        raise Refused from None


def loads(text: str) -> Any:
    """`json.loads(text)` (raises what it raises)."""
    return json.loads(text)


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
