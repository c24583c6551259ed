"""The prompt of a request as text segments in order, and the token estimate that goes with it.

Segments feed prefix hashing, so what matters is that equal prompts give equal segments and
that a prompt which extends another gives segments that extend the other's. Each segment is
one unit of the prompt: `"system: ..."`, `"tools: <canonical JSON>"`, `"user: ..."` (parts of
one message joined by newlines), or a raw completion prompt.

Content that would be costly to copy is included **by reference**: an image, audio, video or
file part becomes `<image:{ref}>` (`ref` is the URL for a short http(s) URL, else
`{utf8 length}:{blake2b of the first and last 4 KiB}`, see `digest`), a provider file id
becomes `<file:id:{id}>`, and any text longer than `LONG_TEXT_BYTES` of UTF-8 becomes
`<text:{length}:{digest}>`. Never are the bytes of such content copied into a segment.

Token estimate (no tokenizer at Pick; it only needs to rank requests by size):

- text: one token per `CHARS_PER_TOKEN` characters (UTF-8 bytes for referenced long text);
- each media part: a fixed `MEDIA_TOKENS[kind]` (roughly one image tile set, a short clip);
- token-id prompts: one token per id;
- each message or input item: `MESSAGE_OVERHEAD_TOKENS` for its role and separators, plus
  `REQUEST_OVERHEAD_TOKENS` once (the reply's priming);
- a part that could not be extracted: its bytes in the body over `CHARS_PER_TOKEN`.

`CHARS_PER_TOKEN` is only the prior: the prompt keeps its text size (`text_chars`) apart
from the fixed estimates (`fixed_tokens`: overheads, media, token ids), and the router
divides the text by the characters per token it learned for the model from the engines'
reports (`routing.textsize`, `Prompt.tokens_at`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from kinference.records import record
from kinference.requests.digest import Digest, source_ref, text_digest, utf8
from kinference.requests.spans import LONG_STRING_BYTES

LONG_TEXT_BYTES = LONG_STRING_BYTES  # the same bound the scanner records strings from
CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 4
REQUEST_OVERHEAD_TOKENS = 3
MEDIA_TOKENS = {"image": 1000, "audio": 500, "video": 4000, "file": 2000}
OTHER_MEDIA_TOKENS = 1000

# A string of at most this many characters has at most LONG_TEXT_BYTES of UTF-8: no need to
# encode it to know it is short (4 bytes per character at most).
SURELY_SHORT_CHARS = LONG_TEXT_BYTES // 4


@record
class Prompt:
    """The prompt text in order; `complete` is False (with `reason`) when part is missing.

    `segments` stop before a part that could not be extracted, so they are still a true
    prefix of the prompt. Turns stored by the provider (`previous_response_id`) are not in
    the body: they appear as a reference and make the prompt incomplete too.
    """

    segments: tuple[str, ...]
    complete: bool = True
    reason: str = ""
    text_chars: int = 0  # characters of text (UTF-8 bytes of referenced or missing parts)
    fixed_tokens: int = 0  # the estimate's part that is no text: overheads, media, ids

    def tokens_at(self, chars_per_token: float, estimate: int) -> float:
        """The token estimate with text at `chars_per_token`; `estimate` (made at the
        prior) when the ratio is the prior or the prompt has no size breakdown."""
        if chars_per_token == CHARS_PER_TOKEN or not (self.text_chars or self.fixed_tokens):
            return float(estimate)
        return self.fixed_tokens + self.text_chars / chars_per_token


class PromptBuilder:
    """Collects segments in prompt order, counting the token estimate along the way.

    Every client string that goes into a segment passes through `text`, `name`, `media` or
    `canonical`, which put long strings by reference and resolve the marker strings of a
    huge field's skeleton (`add_markers`, from `large.load_large`) to the strings they
    stand for.
    """

    def __init__(self) -> None:
        self._segments: list[str] = []
        self._markers: dict[str, Digest] = {}
        self._chars = 0  # characters of text, estimated at CHARS_PER_TOKEN each
        self._tokens = REQUEST_OVERHEAD_TOKENS  # fixed costs: messages, media, token ids
        self._reason = ""  # why the prompt is incomplete
        self._gap = False  # part of it is missing: later segments would not be a prefix

    def add_markers(self, markers: Mapping[str, Digest]) -> None:
        self._markers.update(markers)

    def segment(self, parts: Iterable[str], role: str | None = None) -> None:
        """One segment: the parts joined by newlines, after `role: ` when there is a role."""
        if self._gap:  # after a gap, later text would no longer be a prefix
            return
        body = "\n".join(parts)
        self._segments.append(body if role is None else f"{role}: {body}")

    def message(self, role: str, parts: Iterable[str]) -> None:
        """One message or input item of a conversation."""
        self._tokens += MESSAGE_OVERHEAD_TOKENS
        self.segment(parts, self.name(role))

    def takes_plain(self) -> bool:
        """Whether `plain_messages` may be given segments (no markers to resolve)."""
        return not self._markers

    def plain_messages(self, segments: list[str], chars: int) -> None:
        """Messages formed by the caller as `message(role, [self.text(content)])` forms
        them, for a builder that `takes_plain` and a role and content each of at most
        `SURELY_SHORT_CHARS` characters: `segments` are their `role: content`, `chars`
        their contents' characters (the hot path of a chat Pick: no call a message)."""
        self._chars += chars
        self._tokens += MESSAGE_OVERHEAD_TOKENS * len(segments)
        if not self._gap:
            self._segments.extend(segments)

    def text(self, value: str) -> str:
        """A text part as it appears in a segment: itself, or a reference if it is long."""
        digest = self._long(value)
        if digest is None:
            self._chars += len(value)
            return value
        self._chars += digest.size
        return f"<text:{digest}>"

    def name(self, value: str) -> str:
        """A role, tool name or id: not counted as text (the per-message overhead covers it)."""
        digest = self._long(value)
        return value if digest is None else f"<text:{digest}>"

    def media(self, kind: str, source: str) -> str:
        """A media part given by URL, data URL or base64 data: `<kind:ref>`."""
        self._tokens += MEDIA_TOKENS.get(kind, OTHER_MEDIA_TOKENS)
        digest = self._markers.get(source) if self._markers else None
        return f"<{kind}:{source_ref(source) if digest is None else digest}>"

    def file_id(self, kind: str, file_id: str) -> str:
        """A media part uploaded beforehand and named by the provider's file id."""
        self._tokens += MEDIA_TOKENS.get(kind, OTHER_MEDIA_TOKENS)
        return f"<{kind}:id:{self.name(file_id)}>"

    def token_ids(self, ids: list[int]) -> str:
        self._tokens += len(ids)
        return "<tokens:" + " ".join(map(str, ids)) + ">"

    def canonical(self, value: Any) -> str:
        """`value` as canonical JSON (sorted keys, no spaces), long strings by reference."""
        text = _dumps(value)
        if self._markers or len(text) > SURELY_SHORT_CHARS:  # may hold long strings
            text = _dumps(self._referenced(value))
        self._chars += len(text)
        return text

    def missing(self, reason: str, size: int) -> None:
        """Part of the prompt (`size` bytes of body) could not be extracted."""
        self._chars += size
        self._gap = True
        self.incomplete(reason)

    def stored(self, kind: str, stored_id: str, reason: str) -> None:
        """Part of the prompt is stored by the provider: a reference, and incomplete."""
        self.segment([f"<{kind}:{self.name(stored_id)}>"], kind)
        self.incomplete(reason)

    def incomplete(self, reason: str) -> None:
        if not self._reason:
            self._reason = reason

    def build(self) -> tuple[Prompt, int]:
        """The prompt and its token estimate."""
        estimate = self._tokens + -(-self._chars // CHARS_PER_TOKEN)
        prompt = Prompt(tuple(self._segments), not self._reason, self._reason,
                        self._chars, self._tokens)  # fmt: skip
        return prompt, estimate

    def _long(self, value: str) -> Digest | None:
        """The digest `value` is known by, if it is a marker or long; None for plain text."""
        digest = self._markers.get(value) if self._markers else None
        if digest is None and len(value) > SURELY_SHORT_CHARS:
            digest = _long_text_digest(value)
        return digest

    def _referenced(self, value: Any) -> Any:
        """`value` with long strings (and markers) replaced by their reference text."""
        if isinstance(value, str):
            return self.name(value)
        if isinstance(value, list):
            return [self._referenced(item) for item in value]
        if isinstance(value, dict):
            return {self.name(key): self._referenced(item) for key, item in value.items()}
        return value


def _long_text_digest(value: str) -> Digest | None:
    """The digest of `value` if it is longer than LONG_TEXT_BYTES of UTF-8, else None."""
    if len(value) <= SURELY_SHORT_CHARS:
        return None
    if len(value) <= LONG_TEXT_BYTES and len(utf8(value)) <= LONG_TEXT_BYTES:
        return None
    return text_digest(value)


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
