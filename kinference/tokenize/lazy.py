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
from kinference.tokenize.cuts import Cut, mark_at, step_cuts
from kinference.tokenize.flights import Flights
from kinference.tokenize.pieces import CHECK_CHARS, PIECE_CHARS, Cutter, Ids, Piece
from kinference.tokenize.turns import Mark, PrefixDigest, TurnMarks

# The prompt's blocks so far -> how many of the leading ones some worker holds or is about to
# hold (`kvcache.reach.Reach`); asked again as blocks are added, from the tokenizer thread.
Known = Callable[[Sequence[BlockId]], int]
MAX_STEP_PIECES = 16


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
        flights: Flights | None = None,
    ):
        self._cutter = cutter
        self._marks = marks  # where each stop leaves its last checked cut (`turns`)
        self._flights = flights  # tokenizations whose rest is under way (`flights`)
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
        # The state at the last checked cut passed (where a next turn may resume: `turns`).
        self._cut: Cut | None = None
        self._step_cut: Cut | None = None  # the cut `_cut` was at the previous step's end
        self._marked = 0  # the position of the last mark left (`leave_marks`)
        # The states at message ends passed (`pieces`: `opens`), to leave open marks at.
        self._opens: list[Cut] = []
        self._opened = 0  # the position of the last open mark left
        self._advanced = False  # `advance` was called (then it catches up first: `catch_up`)
        self._reached = False  # the last `advance` stopped at a block no worker holds
        self._deferred = False  # ... left the text ahead to a flight (`flights`)
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

    def catch_up(self, leave: bool = True) -> bool:
        """Go on from a mark another tokenization left further into this text, if any: the
        Picks in flight on one new system prompt walk it once between them, each starting
        its next slice where the furthest one got, not where it stopped itself. `leave`:
        leave this one's own marks first (not inside a Pick on the loop: `advance`)."""
        cutter = self._cutter
        if leave:
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

    @property
    def chars(self) -> int:
        return len(self._cutter.text)

    @property
    def text(self) -> str:
        return self._cutter.text

    @property
    def lineage(self) -> bytes:
        return self._prefix.lead

    def fly(self, flying: bool = True) -> None:
        """Its rest is queued (`flying`: later Picks leave the text it shares with them to
        it), or ended, done or dropped (not `flying`)."""
        if self._flights is not None:
            (self._flights.add if flying and not self.done else self._flights.remove)(self)

    @property
    def done(self) -> bool:
        return self._cutter.done

    @property
    def reached(self) -> bool:
        """The last `advance` stopped at a block no worker holds (the prediction is whole)."""
        return self._reached

    @property
    def deferred(self) -> bool:
        """The last `advance` left the text ahead to a flight (its prediction a floor)."""
        return self._deferred

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
        defer: bool = False,
    ) -> bool:
        """Tokenize on until a block no worker holds (`known`: answers True, nothing after
        it can match), the end, `budget_chars` of new text tokenized or `clock()` passing
        `until` (checked between steps: one step at least), whichever comes first; a step
        cuts at most `step_pieces` pieces. From its second call on, it first catches up
        (`catch_up`). Its stop leaves marks (`leave_marks`) unless not `marks` (a Pick's
        on the loop: only later Picks need them, left after its answer). `defer` (a
        Pick's walk): also stop, after its first step, where a flight shares the text
        ahead (`flights`: `deferred`)."""
        if self._advanced:
            self.catch_up()
        self._advanced, self._reached, self._deferred = True, False, False
        spent, first = 0, True
        while not self.done and (budget_chars is None or spent < budget_chars):
            if until is not None and not first and clock() >= until:
                break
            if defer and not first and self._leave_to_flight(known, marks):
                if self._reached:
                    return True
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

    def _leave_to_flight(self, known: Known | None, marks: bool) -> bool:
        """Whether a flight shares the text ahead (`flights`): then take the furthest mark
        left into this text and stop (`reached` if no worker holds the blocks it gives), or
        walk on if, from there, the text ahead is no longer shared."""
        flights = self._flights
        if flights is None or not flights.ahead(self):
            return False
        if self.catch_up(leave=marks):
            if known is not None and known(self.blocks) < len(self.blocks):
                self._reached = True
                return True
            if not flights.ahead(self):
                return False
        self._deferred = True
        flights.deferred += 1
        return True

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
            mark = mark_at(at, self._steps, self.blocks, self._parts, opens)
            if opens:
                self._opened = at[0]
            else:
                self._marked = at[0]
            marks.put(self._cutter.kind, self._cutter.text, mark, self._prefix)
        end = len(self._cutter.text)
        if self.done and end > self._marked:  # the text's end: the next turn goes on there
            self._marked = end
            at = (
                end,
                self._cutter.made,
                self.tokens,
                len(self.blocks),
                self._tail,
                len(self._parts),
            )
            mark = mark_at(at, self._steps, self.blocks, self._parts, True)
            marks.put(self._cutter.kind, self._cutter.text, mark, self._prefix)

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
        opens, cut = step_cuts(
            pieces, found, new, before, made=self._cutter.made, text_end=len(self._cutter.text),
            block_size=self.block_size,
        )  # fmt: skip
        self._opens += opens
        if cut is not None:
            self._step_cut, self._cut = self._cut, cut
