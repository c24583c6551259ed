"""Process-local request bodies: receive, hold within budgets, hand back once."""

from kinference.bodies.body import (
    MAX_CHUNK_BYTES,
    Body,
    ChunkObserver,
    Observation,
    Piece,
    Upload,
    backing,
)
from kinference.bodies.budget import ByteBudget
from kinference.bodies.ids import IdSource
from kinference.bodies.store import BodyStore, Pull

__all__ = [
    "MAX_CHUNK_BYTES",
    "Body",
    "BodyStore",
    "ByteBudget",
    "ChunkObserver",
    "IdSource",
    "Observation",
    "Piece",
    "Pull",
    "Upload",
    "backing",
]
