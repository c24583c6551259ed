"""Cheap identities for content that the prompt refers to instead of copying.

A base64 image, an audio clip or a 200 KiB pasted document must still shape the prefix of
the prompt (the same image means the same cache), but copying or hashing all of it at Pick
would cost as much as the body. So such content is known by its size and a blake2b digest of
its first and last `WINDOW_BYTES`, taken over its text as UTF-8.

The digest is defined on the decoded text, not on the raw JSON, so a string gets the same
identity whether the body was parsed whole (a Python `str`) or the string was left in a huge
body (`span_digest`, reading only the two windows): a conversation keeps its prefix when it
grows past the size at which bodies are scanned instead of parsed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import AnyStr

from kinference.bodies import Body

WINDOW_BYTES = 4096  # hashed at each end of the content
DIGEST_BYTES = 8  # 16 hex characters: plenty to tell images apart for cache affinity
MAX_VERBATIM_URL = 2048  # longer http(s) URLs are digested like inline data


@dataclass(frozen=True, slots=True)
class Digest:
    """Identity of a string: its UTF-8 length and the hash of its two end windows."""

    size: int  # UTF-8 bytes
    hexdigest: str

    def __str__(self) -> str:
        return f"{self.size}:{self.hexdigest}"


def text_digest(text: str) -> Digest:
    """The digest of a decoded string (lone surrogates, which JSON allows, included).

    An ASCII string (a base64 image, most documents) is its own UTF-8, a byte a character:
    its windows are sliced and encoded alone, not the whole string (a 4 MiB data URL was
    copied whole to hash 8 KiB of it). `isascii` reads a flag CPython keeps, not the text."""
    if not text.isascii():
        return bytes_digest(utf8(text))
    head, tail = _windows(text)
    return Digest(len(text), _hash(head.encode("ascii"), tail.encode("ascii")))


def bytes_digest(data: bytes) -> Digest:
    """The digest of content held in memory as UTF-8."""
    head, tail = _windows(data)
    return Digest(len(data), _hash(head, tail))


def _windows(data: AnyStr) -> tuple[AnyStr, AnyStr]:
    """The head and tail windows of `data` (bytes, or a string of one byte a character)."""
    return data[:WINDOW_BYTES], data[max(WINDOW_BYTES, len(data) - WINDOW_BYTES) :]


def span_digest(body: Body, start: int, end: int) -> Digest:
    """The digest of the body bytes [start, end), which hold the text unescaped, as UTF-8.

    Reads the two windows only, so a 64 MiB string costs the same as an 8 KiB one.
    """
    size = end - start
    head = body.read_span(start, start + min(size, WINDOW_BYTES))
    tail = body.read_span(max(start + WINDOW_BYTES, end - WINDOW_BYTES), end)
    return Digest(size, _hash(head, tail))


def source_ref(source: str) -> str:
    """How a media source appears in the prompt: a short http(s) URL as is, else a digest."""
    if len(source) <= MAX_VERBATIM_URL and source.startswith(("https://", "http://")):
        return source
    return str(text_digest(source))


def utf8(text: str) -> bytes:
    """`text` as UTF-8; json.loads may produce lone surrogates, which are encoded as is."""
    return text.encode("utf-8", "surrogatepass")


def _hash(head: bytes, tail: bytes) -> str:
    digest = hashlib.blake2b(head, digest_size=DIGEST_BYTES)
    digest.update(tail)
    return digest.hexdigest()
