"""A long text tokenized in overlapping windows, in one parallel batch, stitched exactly.

Hugging Face's tokenizer slows down on one very long string (1 MiB: ~1 s here, against
~0.25 s as 4 KiB windows) and hands its result back in calls that hold the GIL for tens of
milliseconds. So the text is cut into `WINDOW_CHARS` windows that overlap their neighbours by
`OVERLAP_CHARS` on each side, all encoded in one `encode_batch` (Rust threads, no GIL), and
stitched at each nominal boundary: around it both windows must produce the same tokens at
the same offsets (`_AGREE_CHARS` either side), and the cut is the first token they share
there. Pre-tokenization is local (a regex over words, spaces and punctuation), so windows
that agree across such a stretch agree from there on. Where they do not (a tokenizer that
treats the start of a text specially, a word longer than the overlap), the text is encoded
whole: windows never change the tokens, they only save time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from kinference.tokenize.reuse import Encoded

WINDOW_CHARS = 4096
OVERLAP_CHARS = 256
_AGREE_CHARS = 96
BatchEncoder = Callable[[Sequence[str], bool], list[Encoded]]  # (texts, add_special_tokens)


def encode_windows(text: str, special: bool, encode: BatchEncoder) -> Encoded:
    """The tokens of `text`, as `encode([text], special)[0]` gives them."""
    if len(text) <= 2 * WINDOW_CHARS:
        return encode([text], special)[0]
    bounds = list(range(WINDOW_CHARS, len(text), WINDOW_CHARS))
    starts = [0, *(b - OVERLAP_CHARS for b in bounds)]
    ends = [*(b + OVERLAP_CHARS for b in bounds), len(text)]
    first = encode([text[: ends[0]]], special)
    rest = encode([text[s:e] for s, e in zip(starts[1:], ends[1:], strict=True)], False)
    shifted = [(ids, offsets + s) for (ids, offsets), s in zip(rest, starts[1:], strict=True)]
    windows = [first[0], *shifted]
    stitched = _stitch(windows, bounds)
    return stitched if stitched is not None else encode([text], special)[0]


def _stitch(windows: list[Encoded], bounds: list[int]) -> Encoded | None:
    ids_parts, start_parts = [], []
    cut = 0
    for index, bound in enumerate(bounds):
        left, right = windows[index], windows[index + 1]
        shared = _shared_cut(left, right, bound)
        if shared is None:
            return None
        ids_parts.append(left[0][(left[1] >= cut) & (left[1] < shared)])
        start_parts.append(left[1][(left[1] >= cut) & (left[1] < shared)])
        cut = shared
    last = windows[-1]
    ids_parts.append(last[0][last[1] >= cut])
    start_parts.append(last[1][last[1] >= cut])
    return np.concatenate(ids_parts), np.concatenate(start_parts)


def _shared_cut(left: Encoded, right: Encoded, bound: int) -> int | None:
    """The first token start both windows share near `bound`, if they agree around it."""
    low, high = bound - _AGREE_CHARS, bound + _AGREE_CHARS
    in_left = (left[1] >= low) & (left[1] < high)
    in_right = (right[1] >= low) & (right[1] < high)
    if not in_left.any() or not np.array_equal(left[1][in_left], right[1][in_right]):
        return None
    if not np.array_equal(left[0][in_left], right[0][in_right]):
        return None
    return int(left[1][in_left][0])
