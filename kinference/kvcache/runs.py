"""Leading runs of blocks a worker is known to hold, so that a Pick need not look each up again.

Every precise Pick asks each worker how far it holds the prompt's leading blocks (`Reach`
while the prompt is tokenized, `BlockIndex.longest` at the match), and a worker that holds a
long shared system prompt answered by a dict lookup per block, ~1k of them per worker at
64 KiB, on every Pick of every conversation on that prompt. A block's identity names its
whole prefix (`kvcache.blocks` chains them), so once a walk found `blocks[:n]` held, any later
prompt whose block `n - 1` has that identity begins with the same `n` blocks; and they are
all held still if the worker removed none since (a store only adds). `KnownRuns` keeps the
last few such run ends per worker, all forgotten at its next removal; a walk starts at the
longest one the prompt has, so its answer is the one the whole walk gives.

Read and written from the event loop and from the tokenizer thread (`Reach`): the removal
count is bumped after the blocks left (`BlockIndex`), and an end is kept only under the
count read before its walk, so an end a removal may have cut is never used. The ends and
the count they were found under are one attribute (a tuple, replaced whole): a walker that
checked the count, then lost the thread to the loop's removal and walk, writes into the
dict of the count it checked, never into the one the loop kept under the new count.
"""

from __future__ import annotations

from collections.abc import Sequence

from kinference.kvcache.blocks import BlockId

MAX_ENDS = 32  # run ends kept per worker (a few per conversation on it, and the shared ones)


class KnownRuns:
    """One worker's run ends known held: the identity of a run's last block -> its length."""

    __slots__ = ("_found", "removals")

    def __init__(self) -> None:
        self.removals = 0  # blocks' removals from the worker so far (bumped after each)
        # The removal count the ends were found under, and the ends: read and replaced whole.
        self._found: tuple[int, dict[BlockId, int]] = (0, {})

    def removed(self) -> None:
        """Blocks just left the worker (call after they left): every known run is forgotten."""
        self.removals += 1

    def start(self, blocks: Sequence[BlockId]) -> int:
        """The longest known held run `blocks` begins with (0: none)."""
        at, ends = self._found
        if at != self.removals or not ends:
            return 0
        best, count = 0, len(blocks)
        for identity, end in list(ends.items()):  # one C call: safe beside the other thread
            if best < end <= count and blocks[end - 1] == identity:
                best = end
        return best

    def found(self, blocks: Sequence[BlockId], end: int, removals: int) -> None:
        """A walk found `blocks[:end]` held; `removals`: the count read before it began."""
        if not end or removals != self.removals:
            return
        at, ends = self._found
        if at != removals:
            ends = {}
            self._found = (removals, ends)
        ends.pop(blocks[end - 1], None)  # the newest last, the oldest dropped first
        ends[blocks[end - 1]] = end
        if len(ends) > MAX_ENDS:
            for identity in list(ends)[:-MAX_ENDS]:  # a list: one C call, as above
                ends.pop(identity, None)
