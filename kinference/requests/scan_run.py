"""The body scan's run below the top level (`scan.JsonScanner`): strings and brackets taken
several in one step, each string skipped by memchr, where the scan's usual path would take
one event a step. `pure_run` is the reference of the C form (`kinference.native._scan.run`,
the same signature, events and counts over the whole window); the scanner is given one or
the other (`JsonScanner(native=...)`)."""

from __future__ import annotations

import re

from kinference.native import Buffer

IN_NESTED = re.compile(rb'["{}\[\]]')
RUN_TOKENS = 64  # strings and brackets one pure step takes below the top level at most
BACKSLASH, QUOTE_BYTE = 0x5C, 0x22
CLOSER = {ord("}"): ord("{"), ord("]"): ord("[")}


def past_bracket(stack: bytearray, char: int, max_depth: int) -> bool:
    """Push an opening bracket or pop the closing one's match; False where it fails (a
    mismatch, or `max_depth` reached), the stack then unchanged."""
    if char in CLOSER:
        if stack[-1] != CLOSER[char]:
            return False
        stack.pop()
    elif len(stack) >= max_depth:
        return False
    else:
        stack.append(char)
    return True


def pure_run(  # noqa: PLR0917 (the C form's signature, positional for its speed)
    data: Buffer, pos: int, window: int, stack: bytearray, max_depth: int, long_string_bytes: int
) -> tuple[int, int, int, int]:
    """Strings and brackets in data[pos:window] while `stack` is not empty, up to
    RUN_TOKENS: (where to go on, strings, string_bytes, brackets added). Stops where the
    scan's usual path must decide (a string the window cuts, that holds an escaped quote or
    is longer than `long_string_bytes`; a bracket that fails; the top level reached: the
    bracket that empties the stack taken); (pos, 0, 0, 0): nothing taken, e.g. a
    memoryview piece."""
    strings = string_bytes = brackets = 0
    if not isinstance(data, bytes):
        return pos, 0, 0, 0
    for _ in range(RUN_TOKENS):
        match = IN_NESTED.search(data, pos, window)
        if match is None:
            return window, strings, string_bytes, brackets
        at = match.start()
        if (char := data[at]) == QUOTE_BYTE:
            close = data.find(b'"', at + 1, window)
            if close < 0 or data[close - 1] == BACKSLASH or close - at - 1 > long_string_bytes:
                return at, strings, string_bytes, brackets
            strings, string_bytes, pos = strings + 1, string_bytes + close + 1 - at, close + 1
        else:
            if not past_bracket(stack, char, max_depth):
                return at, strings, string_bytes, brackets
            brackets += char not in CLOSER
            pos = at + 1
        if not stack:
            return pos, strings, string_bytes, brackets
    return pos, strings, string_bytes, brackets
