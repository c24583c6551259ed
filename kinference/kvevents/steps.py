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
from collections.abc import Callable, Generator, Iterable
from typing import Any, TypeVar

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

    def spend_within(self, units: int) -> bool:
        """Spends `units` when they leave a turn not yet due (True); else spends nothing."""
        if self.spent + units >= self.per_step:
            return False
        self.spent += units
        return True


def finish(steps: Steps[T]) -> T:
    """Runs `steps` to the end at once (off the loop, or where a stall is acceptable)."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]


async def finish_async(steps: Steps[T], between: Callable[[], object] | None = None) -> T:
    """Runs `steps` to the end, the loop taking a turn at each of its yields (and
    `between` called after each turn)."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        await asyncio.sleep(0)
        if between is not None:
            between()


def cost(event: Event) -> int:
    """The work of applying a decoded event: its blocks and token ids."""
    if isinstance(event, BlockStored):
        return 1 + BLOCK_UNITS * len(event.block_hashes) + len(event.token_ids)
    if isinstance(event, BlockRemoved):
        return 1 + BLOCK_UNITS * len(event.block_hashes)
    return 1


def small(payload_bytes: int, per_step: int = WORK_PER_STEP) -> bool:
    """Whether every event a payload of this size decodes to costs at most a step (an
    engine step's batch): a block hash or token id takes a payload byte at least, and
    costs at most `BLOCK_UNITS`."""
    return 1 + BLOCK_UNITS * payload_bytes <= per_step


def raw_cost(raw: Any) -> int:
    """`cost` of an event still as msgpack unpacked it (a tagged array or a map, unchecked):
    its arrays' values, each block hash `BLOCK_UNITS` (block_hashes is the first field of
    the array form of both events that name blocks)."""
    values: Iterable[Any]
    if isinstance(raw, list):
        values, hashes = raw[1:], raw[1] if len(raw) > 1 else None
    elif isinstance(raw, dict):
        values, hashes = raw.values(), raw.get("block_hashes")
    else:
        return 1
    blocks = len(hashes) if isinstance(hashes, list) else 0
    return 1 + sum(len(v) for v in values if isinstance(v, list)) + (BLOCK_UNITS - 1) * blocks


def blocks_per_event(block_size: int, per_step: int = WORK_PER_STEP) -> int:
    """The blocks of a large event cut into events that each cost at most a step to apply
    (`wire.decode_steps`; the subscriber applies at least one event per step)."""
    return max((per_step - 1) // (BLOCK_UNITS + block_size), 1)  # `cost` adds 1 an event
