"""KV-cache events as the engines publish them, decoded (`kvevents.wire`); no I/O here."""

from __future__ import annotations

from dataclasses import dataclass

EngineHash = int | bytes
_GPU = "GPU"


@dataclass(frozen=True, slots=True)
class BlockStored:
    """Blocks now cached, in order: each extends the previous, the first `parent`."""

    block_hashes: tuple[EngineHash, ...]
    parent: EngineHash | None
    token_ids: tuple[int, ...]
    block_size: int
    lora: str | None = None  # the adapter's name (or id) the blocks were computed with
    medium: str | None = None  # None or "GPU" for the engine's own cache


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    block_hashes: tuple[EngineHash, ...]
    medium: str | None = None


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    pass


Event = BlockStored | BlockRemoved | AllBlocksCleared


@dataclass(frozen=True, slots=True)
class EventBatch:
    ts: float
    events: tuple[Event, ...]
    dp_rank: int | None = None


def on_gpu(medium: str | None) -> bool:
    """Whether events of `medium` are about the engine's own (prefix-cache) blocks."""
    return medium is None or medium.upper() == _GPU
