"""`kinference.requests.digest`: a string's identity from its UTF-8 size and end windows."""

from __future__ import annotations

import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from kinference.requests.digest import WINDOW_BYTES, bytes_digest, text_digest, utf8

EDGES = [0, 1, WINDOW_BYTES - 1, WINDOW_BYTES, WINDOW_BYTES + 1, 2 * WINDOW_BYTES - 1,
         2 * WINDOW_BYTES, 2 * WINDOW_BYTES + 1, 3 * WINDOW_BYTES + 7]  # fmt: skip


def test_an_ascii_string_is_digested_as_its_utf8_at_every_window_edge() -> None:
    for size in EDGES:
        text = "".join(chr(32 + (i * 7919) % 95) for i in range(size))
        assert text_digest(text) == bytes_digest(text.encode("ascii")), size


@settings(max_examples=60, deadline=None)
@given(
    st.text(st.characters(codec="utf-8") | st.characters(max_codepoint=127), max_size=40),
    st.sampled_from(EDGES),
    st.sampled_from(["a", "é", "\ud800", "€"]),  # ASCII, 2 bytes, a lone surrogate, 3 bytes
)
def test_any_string_is_digested_as_its_utf8(piece: str, size: int, fill: str) -> None:
    text = fill * size + piece + fill * (size // 3)
    assert text_digest(text) == bytes_digest(utf8(text))


def test_a_long_ascii_string_is_not_copied_whole() -> None:
    """A 4 MiB data URL: the windows are read, not a 4 MiB copy of the string made."""
    data_url = "data:image/png;base64," + "QUJD" * (1 << 20)
    tracemalloc.start()
    try:
        digest = text_digest(data_url)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024  # was the whole string's UTF-8, 4 MiB
    assert digest == bytes_digest(data_url.encode("ascii"))
