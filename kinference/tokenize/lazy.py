"""A prompt tokenized piece by piece, only as far as some worker may hold its prefix.

A worker's cached prefix ends at its first block it does not hold, so once a block of the
prompt is held by no worker (nor expected from a request routed there), nothing after it
can match anywhere: the Pick needs no more tokens. `advance` tokenizes checked pieces
(`pieces.Cutter`) in steps of 1, 2, 4, ... pieces (one parallel batch each), names the new
blocks (chained from the last), asks `known` from where on no worker holds them, and stops
there, or at the end, or once `budget_chars` have been tokenized. The remainder's token count
is estimated from the prompt's characters per token so far; `advance` may resume later (the
rest tokenized after the Pick is answered, so the next turn finds every piece known).
Used from one thread only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from kinference.kvcache.blocks import BlockId, PromptBlocks, identities
from kinference.tokenize.pieces import CHECK_CHARS, PIECE_CHARS, Cutter, Ids, Piece
from kinference.tokenize.turns import Leading, Mark, PrefixDigest, TurnMarks

# The prompt's blocks so far -> how many of the leading ones some worker holds or is about to
# hold (`kvcache.reach.Reach`); asked again as blocks are added, from the tokenizer thread.
Known = Callable[[Sequence[BlockId]], int]
MAX_STEP_PIECES = 16
# The state at a checked cut: (position, pieces made, tokens, full blocks, tail, parts).
_Cut = tuple[int, int, int, int, Ids, int]


class PieceSource(Protocol):
    chars_per_token: float

    def tokens(self, text: str, pieces: list[Piece], special: bool) -> tuple[list[Ids], int]:
        """Each piece's ids, and how many characters had to be tokenized (not cached)."""


class Tokenization:
    """One prompt's tokens and engine blocks so far."""

    def __init__(
        self,
        cutter: Cutter,
        source: PieceSource,
        block_size: int,
        special: bool,
        marks: TurnMarks | None = None,
        *,
        prefix: PrefixDigest | None = None,
    ):
        self._cutter = cutter
        self._marks = marks  # where each stop leaves its last checked cut (`turns`)
        # The text's digests for those marks, each going on from the last (`turns`).
        self._prefix = prefix or PrefixDigest(cutter.kind, cutter.text)
        self._source = source
        self._special = special  # special tokens on the first piece (completion prompts)
        self.block_size = block_size
        self.tokens = 0  # exact tokens of the pieces done
        self.blocks: list[BlockId] = []
        self.encoded_chars = 0  # characters tokenized by this prompt (not found in the cache)
        self.seconds = 0.0
        self._tail: Ids = np.zeros(0, dtype=np.uint32)  # tokens after the last full block
        self._parts: list[Ids] = []
        self._steps = 0
        # The state at the last checked cut passed (where a next turn may resume: `turns`):
        # (position, pieces made, tokens, full blocks, tail, parts).
        self._cut: _Cut | None = None
        self._step_cut: _Cut | None = None  # the cut `_cut` was at the previous step's end
        self._marked = 0  # the position of the last mark left (`leave_marks`)
        # The states at message ends passed (`pieces`: `opens`), to leave open marks at.
        self._opens: list[_Cut] = []
        self._opened = 0  # the position of the last open mark left
        self._advanced = False  # `advance` was called (then it catches up first: `catch_up`)
        self._reached = False  # the last `advance` stopped at a block no worker holds
        self._short = False  # the next step is one short piece (`resume`)

    def resume(self, mark: Mark, short: bool = False) -> None:
        """Start from a mark of an earlier tokenization of a text with the same start;
        `short`: the next step is one short piece, as from a text's start: a Pick's text past
        its history (a next turn's new messages, a new question on a shared system prompt) is
        held by no worker past its first blocks (the engine stored the previous prompt, not
        the reply as tokenized here); the rest only later Picks need (`prepare`)."""
        self._short = short
        self._cutter.resume(mark.position, mark.made)
        self._steps, self.tokens, self._tail = mark.steps, mark.tokens, mark.tail
        self.blocks, self._parts = list(mark.blocks), list(mark.parts)
        self._cut, self._step_cut, self._marked = None, None, mark.position
        self._opens, self._opened = [], mark.position

    def catch_up(self) -> bool:
        """Go on from a mark another tokenization left further into this text, if any: the
        Picks in flight on one new system prompt walk it once between them, each starting
        its next slice where the furthest one got, not where it stopped itself."""
        cutter = self._cutter
        self.leave_marks()  # a Pick's stop's (`advance`), before a resume drops them
        if self._marks is None or self.done:
            return False
        found = self._marks.find(
            cutter.kind, cutter.text, self._prefix, cutter.can_cut_at, cutter.position
        )
        if found is not None:
            self.resume(found)
        return found is not None

    def catch_up_only(self, known: Known | None) -> None:
        """A Pick's time is up before its walk went on: take the furthest mark another
        tokenization left into this text (`catch_up`), tokenize nothing, and note whether
        no worker holds the blocks that mark gives (then the prediction is whole)."""
        self.catch_up()
        self._advanced = True
        self._reached = known is not None and known(self.blocks) < len(self.blocks)

    def mark(self, cut: _Cut | None = None, opens: bool = False) -> Mark | None:
        """The state at the last checked cut passed (or at `cut`), if any (for the next
        turn); `opens`: at a message's end, for any text going on from there (`turns`)."""
        cut = cut or self._cut
        if cut is None:
            return None
        position, made, tokens, blocks, tail, parts = cut
        return Mark(
            position, made, self._steps, tokens, Leading(self.blocks, blocks), tail,
            Leading(self._parts, parts), ends=opens,
        )  # fmt: skip

    @property
    def chars(self) -> int:
        return len(self._cutter.text)

    @property
    def done(self) -> bool:
        return self._cutter.done

    @property
    def reached(self) -> bool:
        """The last `advance` stopped at a block no worker holds (the prediction is whole)."""
        return self._reached

    @property
    def position(self) -> int:
        """Characters of the text tokenized so far."""
        return self._cutter.position

    def advance(
        self,
        known: Known | None = None,
        budget_chars: int | None = None,
        until: float | None = None,
        *,
        clock: Callable[[], float] = time.perf_counter,
        step_pieces: int = MAX_STEP_PIECES,
        marks: bool = True,
    ) -> bool:
        """Tokenize on until a block no worker holds (`known`: answers True, nothing after
        it can match), the end, `budget_chars` of new text tokenized or `clock()` passing
        `until` (checked between steps: one step at least), whichever comes first; a step
        cuts at most `step_pieces` pieces. From its second call on, it first catches up
        (`catch_up`). Its stop leaves marks (`leave_marks`) unless not `marks` (a Pick's
        on the loop: only later Picks need them, left after its answer)."""
        if self._advanced:
            self.catch_up()
        self._advanced, self._reached = True, False
        spent, first = 0, True
        while not self.done and (budget_chars is None or spent < budget_chars):
            if until is not None and not first and clock() >= until:
                break
            first = False
            before, count = self.encoded_chars, min(1 << self._steps, step_pieces)
            if budget_chars is not None:  # a step is one batch: keep it within the budget
                count = min(count, max(1, -(-(budget_chars - spent) // PIECE_CHARS)))
            self._step(count)
            spent += self.encoded_chars - before
            if known is not None and known(self.blocks) < len(self.blocks):
                if marks:
                    self.leave_marks()
                self._reached = True
                return True
        if marks:
            self.leave_marks()
        return False

    def leave_marks(self) -> None:
        """Leave the state at the last checked cut passed for a next turn (`turns`), at
        every stop, not only at the end: a Pick's tokenization stops where no worker holds
        the prompt, and its rest, left to the background, may not be done by the next turn
        (Picks come first), which would then walk the whole history again."""
        marks, cut = self._marks, self._cut
        if marks is None:
            return
        # The previous step's cut too (up to a step, 16 KiB, before): texts that share all
        # but their last part (conversations on one long system prompt, each with its own
        # first message) resume there, where the last cut, in the part they do not share,
        # fits only this text's next turn. And an open mark at each message end passed: a
        # new conversation on the same first messages resumes at their end. In the order
        # of the text each one holds (`PrefixDigest` goes on from the last).
        left = [(at, True) for at in self._opens if at[0] > self._opened]
        left += [(at, False) for at in (self._step_cut, cut) if at and at[0] > self._marked]
        self._opens = []
        for at, opens in sorted(left, key=lambda a: a[0][0] + (0 if a[1] else CHECK_CHARS)):
            if (mark := self.mark(at, opens)) is None:
                continue
            if opens:
                self._opened = at[0]
            else:
                self._marked = at[0]
            marks.put(self._cutter.kind, self._cutter.text, mark, self._prefix)
        end = len(self._cutter.text)
        if self.done and end > self._marked:  # the text's end: the next turn goes on there
            self._marked = end
            marks.put(self._cutter.kind, self._cutter.text, self._end_mark(), self._prefix)

    def _end_mark(self) -> Mark:
        """The state at the text's end (`turns`: taken where the next text's cut there is
        good)."""
        return Mark(
            len(self._cutter.text), self._cutter.made, self._steps, self.tokens,
            Leading(self.blocks, len(self.blocks)), self._tail,
            Leading(self._parts, len(self._parts)), ends=True,
        )  # fmt: skip

    def ids(self) -> Ids:
        """The tokens of the pieces done."""
        return np.concatenate(self._parts) if self._parts else np.zeros(0, dtype=np.uint32)

    def result(self, ticket: int = 0) -> PromptBlocks:
        tokens, exact = self.tokens, self.done
        if not exact:
            done = self._cutter.position
            rest = len(self._cutter.text) - done
            # This prompt's own characters per token so far, else the model's.
            ratio = done / self.tokens if self.tokens else self._source.chars_per_token
            tokens += round(rest / max(ratio, 0.1))
        return PromptBlocks(
            tokens, self.block_size, tuple(self.blocks), self.seconds, exact,
            0 if exact else ticket, bounded=not exact and not self._reached,
        )  # fmt: skip

    def _step(self, count: int) -> None:
        self._steps += 1
        short, self._short = self._short, False
        pieces = (
            self._cutter.next_pieces(1, short=True) if short else self._cutter.next_pieces(count)
        )
        if not pieces:
            return
        special = self._special and pieces[0].start == 0
        found, encoded = self._source.tokens(self._cutter.text, pieces, special)
        self.encoded_chars += encoded
        before = (self.tokens, len(self.blocks), len(self._tail), len(self._parts))
        self._parts.extend(found)
        new = np.concatenate([self._tail, *found]) if found else self._tail
        self.tokens += len(new) - len(self._tail)
        full = len(new) // self.block_size * self.block_size
        parent = self.blocks[-1] if self.blocks else None
        self.blocks.extend(identities(new[:full], self.block_size, parent=parent))
        self._tail = new[full:]
        self._note_cut(pieces, found, new, before)

    def _note_cut(
        self, pieces: list[Piece], found: list[Ids], new: Ids, before: tuple[int, int, int, int]
    ) -> None:
        """Remember the state at the step's last checked cut: the end of its last piece if
        that is not the text's end, else the start of that piece (`turns`); and at each of
        its message ends (`pieces`: `opens`)."""
        if len(found) != len(pieces):
            return
        self._opens += [
            self._state(pieces, found, new, before, len(pieces) - 1 - i)
            for i, piece in enumerate(pieces)
            if piece.opens
        ]
        if pieces[-1].end < len(self._cutter.text):
            last = 0  # the step ended at a checked cut
        elif len(pieces) > 1:
            last = 1  # its last piece ends the text: the cut before that piece
        else:
            return
        self._step_cut = self._cut
        self._cut = self._state(pieces, found, new, before, last)

    def _state(
        self,
        pieces: list[Piece],
        found: list[Ids],
        new: Ids,
        before: tuple[int, int, int, int],
        last: int,
    ) -> _Cut:
        """The state at the cut before this step's `last` last pieces (0: at its end)."""
        tokens, blocks, tail, parts = before
        upto = len(new) - sum(map(len, found[len(found) - last :]))  # of `new`
        done = upto // self.block_size * self.block_size
        return (
            pieces[-1 - last].end, self._cutter.made - last, tokens + upto - tail,
            blocks + done // self.block_size, new[done:upto], parts + len(found) - last,
        )  # fmt: skip
