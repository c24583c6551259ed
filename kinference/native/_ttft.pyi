from collections.abc import Callable

import numpy as np
import numpy.typing as npt

def terms(
    out: npt.NDArray[np.float64],
    slots: npt.NDArray[np.intp],
    cached: npt.NDArray[np.float64],
    waiting: npt.NDArray[np.float64],
    table: object,
    per_token: npt.NDArray[np.float64] | None,
    base: npt.NDArray[np.float64] | None,
    service: npt.NDArray[np.float64] | None,
    constants: tuple[float, ...],
    busy: float,
    prompt: float,
    memory: list[float] | None,
    fits: list[float] | None,
    footprint: list[float] | None,
    clock: Callable[[], float],
    scoring: bool,
    pool: npt.NDArray[np.intp] | None,
    /,
) -> object:
    """Writes the TTFT model's small-form rows into `out` (rows x len(slots)): predicted,
    wait, prefill, slot_wait, unsure, sequences and (`scoring`) the score, the batch
    evidence read over `pool` (the pool's ready slots; None: `slots`); answers None,
    or NotImplemented where an argument is not of the types it takes (nothing written:
    run the pure form). The same values and errors as `ttft_small.small_terms` and
    `TtftScorer._score_small`'s pure form."""

def choose(*args: object) -> object:
    """`terms`' 17 arguments (`scoring` true), then weight (float), home (int or None), ids
    (uint64 per table slot, or None), queue, kv_usage (float64 per slot; queue None: no
    saturation check), queue_depth, kv_cache, own (floats): the pipeline's choice when the
    TTFT scorer is the only one answering. First, with `queue`, the saturation filter's
    check of the candidates (`levels_with_hits_of`, a candidate's KV use left out where
    its cached tokens reach `own`): -2 where one is saturated (nothing computed). Else the
    rows of `terms`, row 6 becoming the weighted totals (`weight` times the clamped
    score), and `MaxScorePicker.pick`'s index on them, `home` the key of the prompt's
    home; -1 where the pick is left to Python (equal bests are drawn at random; a cold
    prefix's near bests without a 64-bit key or ids). NotImplemented where an argument
    is not taken (nothing computed: run the pure form)."""

def signals(
    out: npt.NDArray[np.float64],
    now: float,
    max_age: float,
    scraped_at: npt.NDArray[np.float64],
    waiting: npt.NDArray[np.float64],
    kv_usage: npt.NDArray[np.float64],
    running: npt.NDArray[np.float64],
    inflight: npt.NDArray[np.float64],
    inflight_at_reading: npt.NDArray[np.float64],
    batch: npt.NDArray[np.float64],
    /,
) -> object:
    """Writes into `out` (3 x the columns' length) the fresh waiting, the fresh KV-cache
    use and the queues now per slot, as `EngineReadings.engine_signals` and `.queue_now`
    compute them; answers None, or NotImplemented (nothing written) where an argument is
    not a C-contiguous float64 vector of the right length, or `now`/`max_age` not floats."""
