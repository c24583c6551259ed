"""JSON decoding for the request parser.

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

_SLICE = 2048  # children freed by one C call in `discard`: ~0.1 ms of dealloc


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
