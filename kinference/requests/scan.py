"""Incremental scan of a JSON object body as its chunks arrive.

The scan finds the byte spans of the top-level members (`requests.spans`) without building
the document, so a Pick on a 100 MiB body costs the parse of a few small values, and the body
can be rewritten by splicing spans. Work per chunk is a few C-level searches per string or
bracket (below the top level several a step: `scan_run`), never a Python loop per byte.
Values are checked for structure here (balanced brackets, closed strings, one object,
nothing after it); `requests.fields` parses the small enough values strictly. The scan
counts what a parse will cost (`strings`, `string_bytes`, `brackets`, for
`requests/loop_cost.py`): an addition per event, nothing per byte.

Strings longer than `LONG_STRING_BYTES` (base64 images, pasted documents) are recorded with
their span and whether they hold an escape, so the prompt of a huge body can be extracted at
Pick without reading them (`kinference.requests.large`). The escape check is one more `find`
over the bytes of long strings (and over the part of any string that ends a chunk), done here
while the body arrives rather than at Pick: ~3 ms more per 64 MiB of base64.
"""

from __future__ import annotations

import math
import re
import time

from kinference.bodies import Piece, backing
from kinference.native import ScanRun, load_scan
from kinference.requests.scan_run import (
    BACKSLASH,
    CLOSER,
    IN_NESTED,
    QUOTE_BYTE,
    past_bracket,
    pure_run,
)
from kinference.requests.search import find_backslash, find_quote
from kinference.requests.spans import (
    LONG_STRING_BYTES,
    MAX_DEPTH,
    MAX_MEMBERS,
    LongString,
    Member,
)

_AT_TOP = re.compile(rb'["{}\[\],:]')
_NOT_SPACE = re.compile(rb"[^ \t\r\n]")

# Bytes one regex search covers at most (~8 ms per MiB): a step of `feed_until` stays
# short even over a MiB of `1,1,1,...` or of whitespace.
_WINDOW_BYTES = 64 * 1024


# Where the scan stands with respect to the top-level object.
_BEFORE, _EXPECT_KEY, _EXPECT_COLON, _IN_VALUE, _AFTER = range(5)


class JsonScanner:
    """Feed chunks in order; then `members`, `long_strings`, `error`, `open_at`, `close_at` tell."""

    def __init__(self, *, native: bool = True) -> None:
        """`native`: the run below the top level in C where it was built (`scan_run`)."""
        self._run: ScanRun = pure_run
        if native and (loaded := load_scan()) is not None:
            self._run = loaded
        self.members: list[Member] = []
        self.long_strings: list[LongString] = []
        self.error: str | None = None
        self.open_at = -1  # offset of the top-level '{'
        self.close_at = -1  # offset of the top-level '}'
        self.strings = 0  # strings opened, keys included
        self.string_bytes = 0  # bytes of the closed strings, their quotes included
        self.brackets = 0  # '{' and '[' opened, the top-level '{' included
        self._offset = 0  # absolute offset of the chunk being scanned
        self._state = _BEFORE
        self._stack = bytearray()  # open brackets below the top-level object
        self._in_string = False
        self._key_string = False
        self._string_began_here = False
        self._backslash_carry = 0  # trailing backslashes of earlier chunks inside a string
        self._string_start = -1  # absolute offset of the open string's quote
        self._string_escaped = False  # a backslash was seen in an earlier chunk of it

    @property
    def complete(self) -> bool:
        """True when one whole object was seen and nothing is wrong so far."""
        return self.error is None and self._state == _AFTER

    def feed(self, data: Piece) -> None:
        self.feed_until(data, math.inf)

    def feed_until(self, data: Piece, deadline: float) -> int:
        """Scan `data` until `time.perf_counter()` passes `deadline` (one step at least:
        one C search over at most `_WINDOW_BYTES`, and a few bytecodes per event, at most
        `scan_run.RUN_TOKENS` events below the top level); returns how many
        bytes were consumed. When that is fewer than `len(data)`, the rest is to be fed
        next, as a chunk of its own: the scan stops only between two events.

        A view of a received message's tail (`bodies.backing`) is scanned in that `bytes`
        object, from where the view starts: `bytes.find` (memchr) instead of a regex."""
        message = backing(data)
        data, start = message if message is not None else (data, 0)
        pos, end = start, len(data)
        self._offset -= start  # offsets stay absolute in the body
        while pos < end and self.error is None:
            pos = self._step(data, pos)
            if time.perf_counter() >= deadline:
                break
        if self.error is not None:
            pos = end  # nothing more is scanned after an error
        self._offset += pos
        return pos - start

    def adopt(self, other: JsonScanner) -> None:
        """Take the state of `other`, a copy of this scanner that scanned further
        (in the parse worker)."""
        self.__dict__.update(other.__dict__)

    def finish_reason(self) -> str | None:
        """Why the body is not one JSON object, or None if it is (as far as the scan sees)."""
        if self.error is not None:
            return self.error
        if self._state == _BEFORE:
            return "body is empty: expected a JSON object"
        if self._state != _AFTER:
            return "body ends inside the JSON object (truncated or unbalanced)"
        return None

    def _fail(self, reason: str, at: int) -> int:
        self.error = f"invalid JSON at byte {self._offset + at}: {reason}"
        return at + 1

    def _step(self, data: Piece, pos: int) -> int:
        """Scan from `pos` to the next event and handle it; returns where to go on."""
        if self._in_string:
            return self._scan_string(data, pos)
        if self._state in (_BEFORE, _AFTER):
            return self._scan_outside(data, pos, opening=self._state == _BEFORE)
        window = min(pos + _WINDOW_BYTES, len(data))
        if self._stack:
            ran = self._nested_run(data, pos, window)
            if ran > pos:
                return ran
        pattern = IN_NESTED if self._stack else _AT_TOP
        match = pattern.search(data, pos, window)
        if match is None:
            return self._gap(data, pos, window)
        at = match.start()
        gap_end = self._gap(data, pos, at)
        if self.error is not None:
            return gap_end
        return self._structural(data[at], at)

    def _nested_run(self, data: Piece, pos: int, window: int) -> int:
        """Strings and brackets below the top level, several in one step (`scan_run`), counted
        as the usual path counts them; returns where to go on (`pos`: nothing taken)."""
        after, strings, string_bytes, brackets = self._run(
            data, pos, window, self._stack, MAX_DEPTH, LONG_STRING_BYTES
        )
        self.strings, self.brackets = self.strings + strings, self.brackets + brackets
        self.string_bytes += string_bytes
        return after

    def _gap(self, data: Piece, start: int, stop: int) -> int:
        """Bytes between structural characters: only values may have any there."""
        if self._state in (_EXPECT_KEY, _EXPECT_COLON) and not self._stack:
            extra = _NOT_SPACE.search(data, start, stop)
            if extra is not None:
                return self._fail("expected a quoted key, ':' or '}'", extra.start())
        return stop

    def _scan_outside(self, data: Piece, pos: int, *, opening: bool) -> int:
        window = min(pos + _WINDOW_BYTES, len(data))
        match = _NOT_SPACE.search(data, pos, window)
        if match is None:
            return window
        at = match.start()
        if not opening:
            return self._fail("unexpected data after the top-level object", at)
        if data[at] != ord("{"):
            return self._fail("the body is not a JSON object", at)
        self.open_at = self._offset + at
        self._state = _EXPECT_KEY
        self.brackets += 1
        return at + 1

    def _structural(self, char: int, at: int) -> int:
        if char == QUOTE_BYTE:
            return self._open_string(at)
        if self._stack:
            return self._nested_bracket(char, at)
        return self._top_level(char, at)

    def _open_string(self, at: int) -> int:
        if self._state == _EXPECT_COLON and not self._stack:
            return self._fail("expected ':' after a key", at)
        self._key_string = self._state == _EXPECT_KEY and not self._stack
        if self._key_string:
            if len(self.members) >= MAX_MEMBERS:
                return self._fail(f"more than {MAX_MEMBERS} top-level fields", at)
            self.members.append(Member(self._offset + at, -1))
        self.strings += 1
        self._in_string, self._string_began_here, self._backslash_carry = True, True, 0
        self._string_start, self._string_escaped = self._offset + at, False
        return at + 1

    def _nested_bracket(self, char: int, at: int) -> int:
        if past_bracket(self._stack, char, MAX_DEPTH):
            self.brackets += char not in CLOSER
            return at + 1
        if char in CLOSER:
            return self._fail("mismatched bracket", at)
        return self._fail(f"nesting deeper than {MAX_DEPTH}", at)

    def _top_level(self, char: int, at: int) -> int:
        state, absolute = self._state, self._offset + at
        if state == _EXPECT_COLON and char == ord(":"):
            self.members[-1].value_start = absolute + 1
            self._state = _IN_VALUE
        elif state == _IN_VALUE and char in (ord("{"), ord("[")):
            self._stack.append(char)
            self.brackets += 1
        elif state == _IN_VALUE and char in (ord(","), ord("}")):
            self.members[-1].value_end = absolute
            self._state = _EXPECT_KEY if char == ord(",") else self._close(absolute)
        elif state == _EXPECT_KEY and char == ord("}") and self._after_open_brace():
            self._state = self._close(absolute)
        else:
            return self._fail(f"unexpected {chr(char)!r}", at)
        return at + 1

    def _after_open_brace(self) -> bool:
        return not self.members  # '}' right after '{'; after ',' it is a trailing comma

    def _close(self, absolute: int) -> int:
        self.close_at = absolute
        return _AFTER

    def _scan_string(self, data: Piece, pos: int) -> int:
        """Find the closing quote, skipping escaped ones, with escapes split across chunks."""
        search_from = pos
        while True:
            at = find_quote(data, search_from)
            if at < 0:
                self._carry_backslashes(data, pos)
                self._note_escapes(data, pos, len(data))
                self._string_began_here = False
                return len(data)
            if self._backslashes_before(data, pos, at) % 2 == 0:
                return self._close_string(data, pos, at)
            search_from = at + 1

    def _backslashes_before(self, data: Piece, lo: int, at: int) -> int:
        index = at - 1
        while index >= lo and data[index] == BACKSLASH:
            index -= 1
        run = at - 1 - index
        if index < lo and not self._string_began_here:
            run += self._backslash_carry  # the run reaches back into the previous chunk
        return run

    def _carry_backslashes(self, data: Piece, lo: int) -> None:
        run = self._backslashes_before(data, lo, len(data))
        self._backslash_carry = run

    def _note_escapes(self, data: Piece, lo: int, hi: int) -> None:
        """Remember whether this chunk's part [lo, hi) of the open string holds a backslash."""
        if not self._string_escaped:
            self._string_escaped = find_backslash(data, lo, hi) >= 0

    def _close_string(self, data: Piece, pos: int, at: int) -> int:
        self._in_string = False
        end = self._offset + at + 1
        self.string_bytes += end - self._string_start
        if end - self._string_start - 2 > LONG_STRING_BYTES:  # rare: only these pay the find
            self._note_escapes(data, pos, at)
            self.long_strings.append(LongString(self._string_start, end, self._string_escaped))
        if self._key_string:
            self.members[-1].key_end = self._offset + at + 1
            self._state = _EXPECT_COLON
        return at + 1
