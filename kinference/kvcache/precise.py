"""Precise prefix-cache state of the pools in `prefix: {mode: precise}`, as routing reads it.

Per pool one `PoolCaches` (`kvcache.pool`). A Pick asks `match` for its candidates: each
trusted worker's longest cached prefix of the prompt's engine blocks (as it will survive
until the request runs), whether the request fits in the worker's cache beside the
requests ahead (`kvcache.memory`), and which candidates are not trusted now (they fall back
to the approximate index). The service tells it where requests went and when they ended.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from kinference.kvcache.blocks import BlockId, PromptBlocks
from kinference.kvcache.memory import FITS, Room
from kinference.kvcache.paced import BUDGET, Paced
from kinference.kvcache.pool import PoolCaches, Request
from kinference.kvcache.tickets import MAX_TICKETS
from kinference.kvevents.trust import Distrust

if TYPE_CHECKING:  # routing.decision imports this module
    from kinference.routing.decision import LocalChoice


@dataclass(frozen=True, slots=True)
class PreciseQuery:
    """A Pick's prompt in each precise pool's engine blocks, by pool ref; or why not."""

    blocks: dict[str, PromptBlocks]
    problem: str | None = None  # the prompt could not be tokenized (routed approximately)

    def prompt_tokens(self, pool: str) -> int | None:
        """The prompt's tokens in `pool`'s tokenizer (counted, or estimated past where it
        was tokenized), if it was tokenized for that pool: what the cost model should use
        rather than a characters-per-token guess."""
        blocks = self.blocks.get(pool)
        return blocks.tokens if blocks is not None else None


@dataclass(frozen=True, slots=True)
class PreciseMatch:
    """Per candidate (aligned with the slots asked about): cached blocks and trust."""

    blocks: npt.NDArray[np.float64]  # leading prompt blocks cached (0 where not trusted)
    trusted: npt.NDArray[np.bool_]
    distrusted: tuple[tuple[str, Distrust], ...]  # (endpoint, why) of the untrusted ones
    # Per candidate, whether the request fits in its cache (`kvcache.memory`; trusted only).
    rooms: tuple[Room, ...] = ()
    # Positions (`match(lazy=True)`) whose `blocks` are the worker's match in the index,
    # pending blocks included, before its queue is replayed: at least the surviving match
    # (`PoolCaches.surviving`), which `PreciseCaches.settle` gives.
    unsettled: tuple[int, ...] = ()

    def degraded(self) -> str | None:
        """Why this Pick's cache view is degraded, or None (a worker that has published
        nothing yet is not a degradation: that is every engine before its first request)."""
        broken = [(e, why) for e, why in self.distrusted if why is not Distrust.AWAITING]
        if not broken:
            return None
        endpoint, why = broken[0]
        more = f" and {len(broken) - 1} more" if len(broken) > 1 else ""
        return f"precise prefix cache off for {endpoint} ({why.value}){more}: approximate"


class PreciseCaches:
    """Every precise pool's state, by pool ref."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, rest_budget: float = BUDGET
    ) -> None:
        self.clock = clock
        self.pools: dict[str, PoolCaches] = {}
        # Rests of lazily tokenized prompts, applied a few per loop iteration (`kvcache.paced`).
        self.arriving: Paced[tuple[str, int, tuple[BlockId, ...]]] = Paced(
            self._complete, MAX_TICKETS, rest_budget
        )

    def pool(self, ref: str) -> PoolCaches | None:
        return self.pools.get(ref)

    def reach(self, refs: Iterable[str]) -> Callable[[Sequence[BlockId]], int]:
        """How many leading blocks of a prompt being tokenized some worker of these pools
        holds or will hold (`kvcache.reach`; read from the tokenizer thread)."""
        reaches = [pool.reach() for ref in refs if (pool := self.pools.get(ref)) is not None]

        def known(blocks: Sequence[BlockId]) -> int:
            return max((reach(blocks) for reach in reaches), default=0)

        return known

    def match(
        self, ref: str, prompt: PromptBlocks, slots: Iterable[int], output_tokens: int = 0,
        *, lazy: bool = False,
    ) -> PreciseMatch | None:  # fmt: skip
        """`output_tokens`: the request's at most (0: unknown), for whether it fits.
        `lazy`: a candidate whose match would replay its worker's queue now is left at its
        index match, an upper bound of the surviving one (`PreciseMatch.unsettled`)."""
        caches = self.pools.get(ref)
        if caches is None or prompt.block_size != caches.block_size:
            return None
        now = self.clock()
        slot_list = list(slots)
        trusted = np.zeros(len(slot_list), dtype=bool)
        distrusted: list[tuple[str, Distrust]] = []
        for i, slot in enumerate(slot_list):
            trust = caches.trust.get(slot)
            if trust is not None and trust.trusted(now):
                trusted[i] = True
            else:
                why = trust.distrust if trust is not None else None
                distrusted.append((caches.endpoints.get(slot, str(slot)), why or Distrust.AWAITING))
        trusted_list = trusted.tolist()
        longest = caches.index.longest(
            prompt.blocks, [s for s, t in zip(slot_list, trusted_list, strict=True) if t]
        )
        blocks, unsettled = [], []
        for i, (slot, sure) in enumerate(zip(slot_list, trusted_list, strict=True)):
            if not sure:  # (an untrusted worker's match is not read: not replayed)
                blocks.append(0.0)
                continue
            depth = caches.extend(slot, prompt.blocks, longest.get(slot, 0), now)
            if lazy and caches.replays_for(slot, depth):
                unsettled.append(i)  # its depth for now: `settle` it where it matters
                blocks.append(float(depth))
            else:
                blocks.append(float(caches.surviving(slot, prompt.blocks, depth)))
        rooms = tuple(
            caches.room(s, prompt, output_tokens) if t else FITS
            for s, t in zip(slot_list, trusted_list, strict=True)
        )
        return PreciseMatch(np.array(blocks), trusted, tuple(distrusted), rooms, tuple(unsettled))

    def settle(self, ref: str, prompt: PromptBlocks, slot: int, depth: int) -> int:
        """The surviving match of an unsettled candidate (`PreciseMatch.unsettled`) whose
        match in the index (pending blocks included) is `depth` blocks."""
        return self.pools[ref].surviving(slot, prompt.blocks, depth)

    def routed(
        self,
        ref: str,
        slot: int,
        cached_blocks: int,
        prompt: PromptBlocks,
        *,
        key: int = 0,
        output_tokens: int = 0,
    ) -> None:
        """A request went to `slot`: its blocks are pending there until events name them
        (for a lazily tokenized prompt, the rest once it is tokenized: `completed`), and it
        is in the worker's queue under `key` (`id` of its `LocalChoice`) until `released`,
        with `output_tokens` at most to generate (0: unknown)."""
        caches = self.pools.get(ref)
        if caches is None or slot not in caches.trust:
            return
        request = Request(key, output_tokens, self.clock())
        caches.sent(slot, prompt, cached_blocks, request)
        if not prompt.exact and prompt.ticket:
            caches.claim(prompt.ticket, slot, request.now)

    def completed(self, ref: str, ticket: int, blocks: tuple[BlockId, ...]) -> None:
        """The blocks of a lazily tokenized prompt, now tokenized to the end (on the loop):
        applied within a time budget per loop iteration, so that many 1 MiB prompts'
        rests finishing together do not hold the loop for all of them at once."""
        self.arriving.put((ref, ticket, blocks))

    def _complete(self, rest: tuple[str, int, tuple[BlockId, ...]]) -> None:
        ref, ticket, blocks = rest
        caches = self.pools.get(ref)
        if caches is not None:
            caches.complete(ticket, blocks, self.clock())

    def served(self, choice: LocalChoice) -> None:
        """The caller saw the first token of a request sent to `choice`: the engine has run
        its prompt, so if that stored new blocks, their events are due (a stall otherwise).
        Counted from the first token rather than the Pick, so that requests the caller never
        dispatched (Abort) do not look like a stalled publisher."""
        caches = self.pools.get(choice.pool)
        trust = caches.trust.get(choice.slot) if caches is not None else None
        if trust is None or caches is None:
            return
        caches.started(choice.slot, id(choice))
        # New blocks are due unless the engine held all the prompt's full blocks already, or
        # its events named them before this report (they usually do: the engine publishes
        # them to us as the step that made the first token ends, and the token goes through
        # the caller); else an engine idle from then on looked like a stalled publisher.
        cached = choice.predicted_cached_tokens or 0
        if cached + caches.block_size <= choice.prompt_tokens and not caches.stored(
            choice.slot, id(choice)
        ):
            trust.routed(self.clock())

    def released(self, choice: LocalChoice) -> None:
        """The request sent to `choice` ended (final report, Abort or TTL): its blocks are
        free on the engine again, and it is no longer ahead of anything there."""
        caches = self.pools.get(choice.pool)
        if caches is not None:
            caches.finished(choice.slot, id(choice))

    def precise_workers(self) -> dict[str, dict[str, bool]]:
        """Pool ref -> endpoint -> whether that worker is on precise matching now."""
        now = self.clock()
        return {
            ref: {caches.endpoints[s]: t.trusted(now) for s, t in caches.trust.items()}
            for ref, caches in self.pools.items()
        }


def fuse(
    match: PreciseMatch, approximate: npt.NDArray[np.float64], approximate_total: int, total: int
) -> npt.NDArray[np.float64]:
    """Cached blocks per candidate in the prompt's engine blocks (`total` of them): the
    precise count where trusted, the approximate index's share of the prompt elsewhere."""
    share = approximate / approximate_total if approximate_total else np.zeros_like(approximate)
    return np.where(match.trusted, match.blocks, share * total)
