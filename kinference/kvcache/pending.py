"""The blocks a worker is about to store: those of requests routed there, not stored yet.

Such a block counts as cached there (the next turn of a conversation sent to the same
worker finds it), and as work the worker must do before a request sent now runs (room it
must make, `kvcache.ageing`). Its `BlockStored` or `BlockRemoved` event ends that.

Only blocks the worker does not hold when they are expected are pending: a block it holds
already will not be announced again (a hit is not a store), so it would stay pending
forever, counted as work the worker never does. That covers a lazily tokenized prompt's
rest, which names the prompt from its first block, and arrives after its leading blocks
were stored. A block whose event never comes (its request failed, was aborted, or the
block was named differently by the engine) is dropped after `PENDING_TTL_S`.

But a block held when it was expected and evicted before its request runs will be stored
again: that request computes it. So the held ones are noted with the request's key
(`reused`: block -> the key of the last request expecting it), and a removal of one
whose request still waits makes it pending (`PoolCaches.apply`). Without that, the
prompt's leading block (a chat template's header, held by every worker) was neither held
nor pending there, and every later prompt's match there ended before it: a document's
second request was predicted nothing on the worker that then served it 5 168 cached
tokens (docs/benchmarks.md, h127).

One dict per worker, block -> when it was last expected, in that order (a block expected
again moves to the end): the expired ones are at its front, taken off there. The tokenizer
thread reads these dicts (`kvcache.reach`) one lookup at a time while the loop changes them.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterable, Mapping, Sequence

from kinference.kvcache.blocks import BlockId

# Seconds a block routed to a worker counts as about to be stored there: a request queued
# behind others has not stored its prompt yet, but the next turn sent there will find it.
PENDING_TTL_S = 30.0
MAX_PENDING_BLOCKS = 200_000  # per worker


def expect(
    waiting: dict[BlockId, float],
    blocks: Sequence[BlockId],
    held: Mapping[BlockId, object],
    now: float,
    reused: tuple[dict[BlockId, int], int] | None = None,
) -> dict[BlockId, float]:
    """`blocks` will be stored (computed, or again if evicted meanwhile): the ones not
    held now are pending from `now` on; the held ones go into `reused`'s dict under its
    key (the request's), if given. Answers the worker's dict (a new one if it had to be
    cut to its bound)."""
    new = dict.fromkeys(itertools.filterfalse(held.__contains__, blocks), now)  # in C
    if reused is not None and len(new) < len(blocks):  # some held (a cold prompt: none)
        note(*reused, filter(held.__contains__, blocks))
    if len(waiting) + len(new) > MAX_PENDING_BLOCKS:  # drop the expired, else all
        expire(waiting, now)
        if len(waiting) + len(new) > MAX_PENDING_BLOCKS:
            waiting = {}
    if waiting:  # the ones expected before go to the end
        collections.deque(map(waiting.pop, new, itertools.repeat(None)), maxlen=0)
    waiting.update(new)  # C speed: a 1 MiB prompt is 16k blocks
    return waiting


def expire(waiting: dict[BlockId, float], now: float) -> None:
    """Drop the blocks expected longer than `PENDING_TTL_S` ago (the dict's front; one
    pass: a dict's front is found by skipping the slots of the keys popped since)."""
    cutoff = now - PENDING_TTL_S
    gone = [key for key, _ in itertools.takewhile(lambda item: item[1] < cutoff, waiting.items())]
    collections.deque(map(waiting.pop, gone), maxlen=0)


def fresh(waiting: Mapping[BlockId, float] | None, identity: BlockId, now: float) -> bool:
    """Whether `identity` is pending and not expired."""
    since = waiting.get(identity) if waiting else None
    return since is not None and now - since <= PENDING_TTL_S


def note(reused: dict[BlockId, int], key: int, blocks: Iterable[BlockId]) -> None:
    """The request `key` will use `blocks`, held now. Bounded as pending blocks are: past
    the bound the oldest notes go, from the dict's front (a block noted again moves to the
    end), so a crowd of requests beyond it keeps the newest (it cleared them all at once)."""
    new = dict.fromkeys(blocks, key)  # in C
    if len(new) > MAX_PENDING_BLOCKS:  # one prompt past the bound: its last blocks
        new = dict(itertools.islice(new.items(), len(new) - MAX_PENDING_BLOCKS, None))
    if reused:  # the ones noted before go to the end
        collections.deque(map(reused.pop, new, itertools.repeat(None)), maxlen=0)
    excess = len(reused) + len(new) - MAX_PENDING_BLOCKS
    if excess > 0:  # the oldest (one pass over the front, as `expire`)
        collections.deque(map(reused.pop, list(itertools.islice(reused, excess))), maxlen=0)
    reused.update(new)


def unnote(reused: dict[BlockId, int], key: int, blocks: Sequence[BlockId]) -> None:
    """The request `key` ran or ended: the blocks it noted are no longer its (in C, but
    for the ones it noted)."""
    mine = reused.items() & dict.fromkeys(blocks, key).items()
    collections.deque(map(reused.pop, (block for block, _ in mine)), maxlen=0)
