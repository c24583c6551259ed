"""KV-cache events as the engines publish them, decoded (`kvevents.wire`); no I/O here."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

EngineHash = int | bytes
# A stored batch's token ids: decoded into one array (never a Python int per token kept).
TokenIds = npt.NDArray[np.uint32] | tuple[int, ...]
_GPU = "GPU"


@dataclass(frozen=True, slots=True)
class BlockStored:
    """Blocks now cached, in order: each extends the previous, the first `parent`."""

    block_hashes: tuple[EngineHash, ...]
    parent: EngineHash | None
    token_ids: TokenIds
    block_size: int
    lora: str | None = None  # the adapter's name (or id) the blocks were computed with
    medium: str | None = None  # None or "GPU" for the engine's own cache
    # Cut from the same event as the one before it (`wire.decode_steps`): its parent is
    # that one's last block as it was computed, whatever block its hash names now.
    continues: bool = False

    def __eq__(self, other: object) -> bool:
        """By value, token ids included whether held as an array or a tuple."""
        if not isinstance(other, BlockStored):
            return NotImplemented
        return (
            (self.block_hashes, self.parent, self.block_size, self.lora, self.medium)
            == (other.block_hashes, other.parent, other.block_size, other.lora, other.medium)
        ) and bool(np.array_equal(self.token_ids, other.token_ids))

    def __hash__(self) -> int:  # consistent with __eq__: equal events name the same blocks
        return hash((self.block_hashes, self.parent, self.block_size))


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
