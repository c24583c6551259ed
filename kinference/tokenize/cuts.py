"""The states a tokenization passes at checked cuts (`lazy`), where marks are left (`turns`):
a step's last checked cut, and each message end it passes (`pieces`: `opens`)."""

from __future__ import annotations

from kinference.kvcache.blocks import BlockId
from kinference.tokenize.pieces import Ids, Piece
from kinference.tokenize.turns import Leading, Mark

# The state at a checked cut: (position, pieces made, tokens, full blocks, tail, parts).
Cut = tuple[int, int, int, int, Ids, int]
# Before a step: (tokens, full blocks, tokens after the last full block, pieces' ids).
Before = tuple[int, int, int, int]


def step_cuts(
    pieces: list[Piece],
    found: list[Ids],
    new: Ids,
    before: Before,
    *,
    made: int,
    text_end: int,
    block_size: int,
) -> tuple[list[Cut], Cut | None]:
    """A step's states at its message ends, and at its last checked cut: the end of its
    last piece if that is not the text's end, else the start of that piece (None: no such
    cut). `new`: the step's tokens after the last full block before it; `made`: pieces cut
    so far."""
    if len(found) != len(pieces):
        return [], None

    def at(last: int) -> Cut:
        """The state at the cut before the step's `last` last pieces (0: at its end)."""
        tokens, blocks, tail, parts = before
        upto = len(new) - sum(map(len, found[len(found) - last :]))  # of `new`
        done = upto // block_size * block_size
        return (
            pieces[-1 - last].end, made - last, tokens + upto - tail,
            blocks + done // block_size, new[done:upto], parts + len(found) - last,
        )  # fmt: skip

    opens = [at(len(pieces) - 1 - i) for i, piece in enumerate(pieces) if piece.opens]
    if pieces[-1].end < text_end:
        return opens, at(0)  # the step ended at a checked cut
    if len(pieces) > 1:
        return opens, at(1)  # its last piece ends the text: the cut before that piece
    return opens, None


def mark_at(cut: Cut, steps: int, blocks: list[BlockId], parts: list[Ids], opens: bool) -> Mark:
    """The mark at `cut` of a tokenization with these `blocks` and `parts` (views of its
    lists, not copies: `turns.Leading`) after `steps` steps; `opens`: at a message's or
    its text's end, for any text going on from there (`turns`)."""
    position, made, tokens, full, tail, count = cut
    return Mark(
        position, made, steps, tokens, Leading(blocks, full), tail, Leading(parts, count),
        ends=opens,
    )  # fmt: skip
