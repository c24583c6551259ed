"""Whether the client itself asked for a stream's usage chunk (`stream_options.include_usage`).

The picker's rewrite turns `include_usage` on for every stream, so the gateway can report
tokens; the usage chunk it adds (`choices: []`) must not reach a client that did not ask for
it (`chunk.choices[0]` code breaks on it). The gateway tells by the client's own body as it
streams into PushBody: a body that never contains `include_usage` did not ask (the common
case, one substring search per chunk); one that does is parsed when it is at most
`PARSE_LIMIT` bytes, and a larger one is taken as asking (nothing is hidden that it may want).

The parse decodes only `stream_options` (msgspec skips the other members without building
them: ~12 against ~33 µs for a 48 KB chat, docs/benchmarks.md); a body msgspec refuses
(beyond RFC 8259: NaN, lone surrogates; or not an object) is read by `json.loads`, so what
counts as asking is what it was.
"""

from __future__ import annotations

import json

import msgspec

PARSE_LIMIT = 1024 * 1024  # bytes; bodies mentioning include_usage up to this are parsed
_MARK = b"include_usage"


class _Options(msgspec.Struct):
    """The one member `asked` reads; the others are skipped, not built."""

    stream_options: object = None


class UsageAsk:
    """Feed it the body's chunks in order; then `asked()`."""

    def __init__(self) -> None:
        self._tail = b""
        self._seen = False
        self._chunks: list[bytes] | None = []
        self._size = 0

    def feed(self, chunk: bytes) -> None:
        self._size += len(chunk)
        if self._chunks is not None:
            if self._size <= PARSE_LIMIT:
                self._chunks.append(chunk)  # a reference, not a copy
            else:
                self._chunks = None
        if not self._seen:
            self._seen = _MARK in chunk or _MARK in self._tail + chunk[: len(_MARK)]
            self._tail = chunk[-(len(_MARK) - 1) :]

    def asked(self) -> bool:
        """Whether `stream_options.include_usage` is true in the client's body."""
        if not self._seen:
            return False
        if self._chunks is None:
            return True
        chunks, self._chunks = self._chunks, None
        raw = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        try:
            options = msgspec.json.decode(raw, type=_Options).stream_options
        except (msgspec.MsgspecError, RecursionError):
            try:
                document = json.loads(raw)
            except (ValueError, RecursionError):
                return True
            options = document.get("stream_options") if isinstance(document, dict) else None
        return isinstance(options, dict) and options.get("include_usage") is True
