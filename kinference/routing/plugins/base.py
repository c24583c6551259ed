"""The routing core's plugin interfaces: Filter, Scorer and Picker (the Gateway API Inference
Extension's and llm-d's scheduler shape), and what they read about one Pick.

A Pick runs in steps over one candidate set (the ready workers of a target's pools):
filters narrow it, every scorer with a non-zero weight maps it to scores in [0, 1] (higher
is better; the pipeline clamps them), the weighted sum is formed generically by scorer
name, and the picker chooses one. Each plugin lives in its own module with its own pydantic
config model and defaults (`kinference.config.routing` composes them); none of them writes
routing state: they read the `PickContext` and answer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import ClassVar, Protocol

from kinference.requests import InferenceRequest
from kinference.routing.features import Signals
from kinference.routing.reasons import Reason
from kinference.routing.table import FloatArray, IndexArray, WorkerTable


@dataclass(slots=True)
class PickContext:
    """What the plugins read about one Pick and its candidates.

    `slots` are the candidates' worker-table slots; every per-candidate array below is
    aligned with them. `cached_tokens[i]` is the prompt tokens predicted cached on candidate
    i (from the pool's `CachedTokenSource`); `prompt_tokens` is the request's estimate.
    """

    request: InferenceRequest
    model: str  # as the pool's engines know it
    pool: str  # namespace/name of the (first) pool of the candidate set
    table: WorkerTable  # read only: plugins never write routing state
    signals: Signals
    slots: IndexArray
    prompt_tokens: float
    cached_tokens: FloatArray
    hashes: tuple[int, ...] = ()  # the prompt's approximate prefix blocks
    # The pool's ready workers serving the model, before the filters narrowed them to
    # `slots` (None: `slots` are all of them). What the pool learned of its batch (the
    # probe in flight or late, the batches seen: `readings`) is read over these.
    pool_slots: IndexArray | None = None
    # Blocks the approximate prefix index holds per candidate (how full its cache is).
    footprint: list[float] | None = None
    # Per candidate, in precise pools whose cache size is known (`kvcache.memory`): the
    # requests ahead that must end before this one fits in its KV cache, and how many then
    # run at once (this one included). None: not known (the batch limit alone bounds).
    memory_ahead: list[float] | None = None
    memory_batch: list[float] | None = None
    # Written by the TTFT scorer when it runs: its prediction per candidate, milliseconds.
    predicted_ttft_ms: FloatArray | None = None
    predicted_wait_ms: FloatArray | None = None  # the part of it spent behind others
    sequences: FloatArray | None = None  # what each runs and queues, as the model sees it
    # Where picking it would be the pool's probe past the most seen (no doubt priced).
    probes: FloatArray | None = None
    # Positions whose `cached_tokens` are still upper bounds (a precise pool's index match
    # before its worker's queue is replayed), made exact before the choice where they could
    # change it (`routing.settle`); None: all exact.
    unsettled: Unsettled | None = None

    def narrowed(self, kept: list[int]) -> PickContext:
        """This context of the candidates at the positions `kept` (of `slots`, in order), as
        it was before any scorer ran: what the same Pick over them alone would read. (Python
        lists and `take`: a boolean mask's numpy calls cost ~3x as much for a handful.)"""

        def of(values: list[float] | None) -> list[float] | None:
            return None if values is None else [values[position] for position in kept]

        return PickContext(
            self.request, self.model, self.pool, self.table, self.signals, self.slots.take(kept),
            self.prompt_tokens, self.cached_tokens.take(kept), self.hashes,
            pool_slots=self.slots if self.pool_slots is None else self.pool_slots,
            footprint=of(self.footprint), memory_ahead=of(self.memory_ahead),
            memory_batch=of(self.memory_batch),
        )  # fmt: skip


class Unsettled(Protocol):
    """`kvcache.source.Unsettled`: the positions whose cached tokens are upper bounds."""

    positions: list[int]

    def settle(self, cached: FloatArray, position: int) -> None:
        """Position `position`'s exact value into `cached` (in place)."""

    def complete(self, cached: FloatArray) -> None:
        """Every position's exact value into `cached` (in place)."""


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a step left no candidate: a typed code (metric label) and the human text."""

    code: Reason
    text: str
    retry_after_s: int | None = None  # whole seconds until a retry can pass, when known


class Filter(Protocol):
    """Narrows the candidate set; answers the kept slots (a subset, in order)."""

    name: ClassVar[str]

    def filter(self, ctx: PickContext, slots: IndexArray) -> IndexArray: ...


class Scorer(Protocol):
    """Scores every candidate of `ctx.slots` in [0, 1], higher is better.

    The pipeline clamps what a scorer answers (NaN counts as 0.5, neutral) and multiplies it
    by the weight configured under the scorer's `name`; a weight of 0 skips the scorer.
    None means the scorer has nothing to tell the candidates apart by in this Pick (the
    same for all): it is skipped, which saves the pipeline the arithmetic.
    """

    name: ClassVar[str]

    def score(self, ctx: PickContext) -> FloatArray | None: ...


class Picker(Protocol):
    """Chooses one candidate from the weighted totals (index into the candidates).

    `home` is given when no candidate holds the prompt's prefix: a key naming the prefix,
    with `endpoints` the candidates' names, so that near ties go to the same candidate for
    the same prefix (`plugins/pick.py`)."""

    name: ClassVar[str]

    def pick(
        self,
        totals: FloatArray | list[float],
        rng: random.Random,
        home: int | None = None,
        endpoints: list[str] | None = None,
    ) -> int: ...
