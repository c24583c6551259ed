"""Prefill picked to a worker and not done yet, by the prefix blocks it computes.

A request picked to a worker prefills its uncached blocks until its first token. Another
request sharing those blocks, picked there meanwhile, finds its prefix being computed: not
its own prefill (the index already counts those blocks as cached there) but a wait all the
same, as other prompts' pending prefill is. Which blocks are pending still matters to the
eviction learning (a report counting blocks still being prefilled proves nothing).
Entries are keyed by whatever identifies one pick (the local choice object, another
replica's pick id) and leave at the first token, an upstream error or the release.
What of the pending prefill a new request waits for (`waited_prefill`): all of it but
what the engine has computed since the worker's pending prefill began, what it shares
included (a prefix being computed is cached only once computed).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt

from kinference.records import record
from kinference.routing.chain import parted


@record
class PendingPrefix:
    """One pick's prefill: its prompt's prefix blocks, of which it computes `hashes[start:]`."""

    hashes: tuple[int, ...]
    start: int  # leading blocks already cached on the worker when it was picked
    tokens: float  # uncached prompt tokens it prefills
    block_tokens: float  # prompt tokens per block

    def shared_tokens(self, hashes: tuple[int, ...]) -> float:
        """Tokens of this prefill that a prompt with `hashes` shares (its blocks from
        `start` up to where the two prompts part). Hashes are chained, so equal hashes
        at block i mean equal prefixes up to i: a binary search finds where they part."""
        start, mine = self.start, self.hashes
        end = min(len(mine), len(hashes))
        if start >= end or mine[start] != hashes[start]:
            return 0.0
        shared = parted(mine, hashes, start + 1, end)  # blocks[:shared] are the same
        return min((shared - start) * self.block_tokens, self.tokens)


class PendingPrefixes:
    """Pending prefills per worker slot (only those with prefix blocks; bounded by the
    requests in flight, each entry leaving at its first token or release)."""

    def __init__(self) -> None:
        self._by_slot: dict[int, dict[object, PendingPrefix]] = {}

    def add(self, slot: int, key: object, entry: PendingPrefix) -> None:
        self._by_slot.setdefault(slot, {})[key] = entry

    def holds(self, slot: int) -> bool:
        """Whether any prefill is pending on `slot`."""
        return slot in self._by_slot

    def pop(self, slot: int, key: object) -> PendingPrefix | None:
        entries = self._by_slot.get(slot)
        if entries is None:
            return None
        entry = entries.pop(key, None)
        if not entries:
            del self._by_slot[slot]
        return entry

    def shared(self, slot: int, hashes: tuple[int, ...]) -> float:
        """Pending prefill tokens on `slot` that a prompt with `hashes` shares."""
        entries = self._by_slot.get(slot)
        if not entries or not hashes:
            return 0.0
        return sum(entry.shared_tokens(hashes) for entry in entries.values())


class _Draining(Protocol):
    """What `waited_prefill` reads of the worker table."""

    pending_prefill: npt.NDArray[np.float64]

    def prefill_done(self, slot: int, ms_per_token: float) -> float: ...


def waited_prefill(table: _Draining, slot: int, pending: float, *, per_token: float) -> float:
    """Of `pending` prefill tokens on the worker, those a new request waits for. vLLM's
    scheduler (v1, chunked prefill) runs a prompt being prefilled first, a chunk per step
    as large as the step's token budget leaves, and starts a new prompt only in what
    budget remains: the new one waits for the rest of what is pending, less what the
    engine has computed since it began (`WorkerTable.prefill_done`). What of it the new
    prompt shares is waited for too: those blocks are a cache hit only once computed, and
    its first token comes after them (h107: a question asked while its 12k-token document
    prefilled was predicted at ~40 ms, took ~0.5 s, and that report taught the engine a
    prefill base of 539 ms or a batch of 1, which sent its later hits cold). Those shared
    tokens are not its own prefill (the index counts them cached), so an engine prefilling
    the document still beats one that would prefill all of it again.
    `pending` is above 0 (the callers ask only then)."""
    return max(pending - table.prefill_done(slot, per_token), 0.0)


def unwaited_prefill(
    table: _Draining,
    slots: npt.NDArray[np.intp],
    per_token: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    """Per candidate, the pending prefill tokens a request does not wait for
    (`waited_prefill`'s complement); 0 where none is pending."""
    pending = table.pending_prefill[slots]
    gone = np.zeros(len(slots))
    for i in np.flatnonzero(pending > 0.0):
        queued = pending.item(i)
        gone[i] = queued - waited_prefill(table, int(slots[i]), queued, per_token=per_token.item(i))
    return gone
