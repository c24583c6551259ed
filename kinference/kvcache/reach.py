"""How far some worker may hold a prompt that is still being tokenized.

A worker's cached prefix ends at its first block it neither holds nor is about to hold (a
request routed there stores it), so once every worker's run of the prompt's leading blocks
has ended, nothing after it can match anywhere and the Pick needs no more tokens
(`tokenize.lazy`). `Reach` follows each worker's run as the tokenizer names more blocks:
a worker whose run ended is not looked at again, the others resume where they stopped; a
worker's first look starts past the longest run it is known to hold (`kvcache.runs`).

Called from the tokenizer thread while the event loop applies events: it only reads, and
each step is one C call (`map` of a dict's lookup over a list) that the GIL keeps whole, so
an event applied meanwhile can only move the answer by the blocks it names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from kinference.kvcache.blocks import BlockId
from kinference.kvcache.index import held_run, leading
from kinference.kvcache.runs import KnownRuns

# One worker's blocks: the ones it holds, and the ones routed there not stored yet (or None);
# and the runs of the held ones known (or None).
Holding = tuple[int, Mapping[BlockId, object], Mapping[BlockId, object] | None, KnownRuns | None]


class Reach:
    """Leading blocks of a growing prompt that some worker holds or will hold."""

    def __init__(self, holdings: Iterable[Holding] | None = None) -> None:
        self._holdings = list(holdings or ())
        self._ends: dict[int, int] = {}  # slot -> end of its run so far
        self._seen = 0  # blocks named at the previous call

    def __call__(self, blocks: Sequence[BlockId]) -> int:
        best = 0
        for slot, held, pending, known in self._holdings:
            end = self._ends.get(slot, 0)
            if end >= self._seen:  # its run reached the end of the previous blocks
                if not self._seen and known is not None:  # a first look
                    end = held_run(held, known, blocks)
                end = self._ends[slot] = run(held, pending, blocks, end)
            best = max(best, end)
        self._seen = len(blocks)
        return best


def run(
    held: Mapping[BlockId, object],
    pending: Mapping[BlockId, object] | None,
    blocks: Sequence[BlockId],
    start: int = 0,
) -> int:
    """The end of the run of `blocks` from `start` that are held or pending."""
    position = start
    while True:
        end = leading(held, blocks, position)
        if pending:
            end = leading(pending, blocks, end)
        if end == position:
            return position
        position = end
