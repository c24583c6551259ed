"""Work on the event loop cut into bounded steps.

Every Pick of a replica waits for its one asyncio loop, so a KV-event batch is decoded and
applied a bounded amount of work at a time: the work is a generator that yields after each
`WORK_PER_STEP` units spent (a unit is about one msgpack value, block hash, token id or
event), and `finish_async` gives the loop a turn at each yield. A thread would not help:
msgpack's C unpacker and the index's bulk updates hold the GIL throughout (measured: a
16 MiB batch unpacked in a thread still held the loop 0.28 s). An ordinary batch (one
scheduler step: hundreds of blocks) costs less than one step and is handled without a turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator, Iterable, Iterator
from typing import TypeVar

from kinference.kvevents.events import BlockRemoved, BlockStored, Event

T = TypeVar("T")
Steps = Generator[None, None, T]  # yields where the loop may take a turn; returns the result

# Units of work between two turns of the loop: ~1-4 ms of decoding or applying here.
WORK_PER_STEP = 32_768
# What a block named by a store or a removal costs the index beside its tokens, in units:
# where hashes repeat it takes a block at a time (~0.7 us), not the bulk update (~0.1 us).
BLOCK_UNITS = 16


class Budget:
    """Counts the work spent since the last turn; `spend` says when a turn is due."""

    def __init__(self, per_step: int = WORK_PER_STEP) -> None:
        self.per_step = per_step
        self.spent = 0
        self.turns = 0  # turns asked for so far

    def spend(self, units: int) -> bool:
        self.spent += units
        if self.spent < self.per_step:
            return False
        self.spent = 0
        self.turns += 1
        return True


def finish(steps: Steps[T]) -> T:
    """Runs `steps` to the end at once (off the loop, or where a stall is acceptable)."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]


async def finish_async(steps: Steps[T]) -> T:
    """Runs `steps` to the end, the loop taking a turn at each of its yields."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        await asyncio.sleep(0)


def cost(event: Event) -> int:
    """The work of applying a decoded event: its blocks and token ids."""
    if isinstance(event, BlockStored):
        return 1 + BLOCK_UNITS * len(event.block_hashes) + len(event.token_ids)
    if isinstance(event, BlockRemoved):
        return 1 + BLOCK_UNITS * len(event.block_hashes)
    return 1


def blocks_per_event(block_size: int, per_step: int = WORK_PER_STEP) -> int:
    """The blocks of a large event cut into events that each cost at most a step to apply
    (`wire.decode_steps`; the subscriber applies at least one event per step)."""
    return max(per_step // (BLOCK_UNITS + block_size), 1)


def split(events: Iterable[Event], per_step: int = WORK_PER_STEP) -> Iterator[Event]:
    """`events`, each costing more than a step cut as `wire.decode_steps` cuts a large one:
    into events of `blocks_per_event` consecutive blocks, each the next one's parent."""
    for event in events:
        if cost(event) <= per_step or not isinstance(event, BlockStored | BlockRemoved):
            yield event
            continue
        hashes = event.block_hashes
        if isinstance(event, BlockRemoved):
            n = blocks_per_event(0, per_step)
            for start in range(0, len(hashes), n):
                yield BlockRemoved(hashes[start : start + n], event.medium)
            continue
        size, n = event.block_size, blocks_per_event(event.block_size, per_step)
        for start in range(0, len(hashes), n):
            yield BlockStored(
                hashes[start : start + n],
                hashes[start - 1] if start else event.parent,
                event.token_ids[start * size : (start + n) * size],
                size,
                event.lora,
                event.medium,
                continues=start > 0 or event.continues,
            )
