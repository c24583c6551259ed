"""Random Picks for the C TTFT form's parity tests: a worker table, its readings and
pending prefill, learned rates, a prompt and its cached tokens on a handful of candidates,
as hypothesis draws them (odd floats included: NaN, infinities, -0.0, negatives)."""

from __future__ import annotations

import itertools
import math
import struct
import sys
from typing import Any

import numpy as np
from hypothesis import strategies as st

from kinference.routing.features import Signals
from kinference.routing.pending import PendingPrefix
from kinference.routing.plugins.base import PickContext
from kinference.routing.rates import Rates
from kinference.routing.scorers.ttft import TtftScorer
from kinference.routing.scorers.ttft_config import TtftConfig
from kinference.routing.table import WorkerTable
from tests.routing.plugin_helpers import MODEL, request

ODD = (0.0, -0.0, 1.0, 2.0, 3.0, 8.0, math.inf, -math.inf, math.nan, 1e308, -1e-300)
# Hypothesis's own choice of boundary floats (`st.floats` draws them often), both signs.
NASTY = tuple(
    sign * value
    for value in (
        0.5, 1.1, 1.5, 1.9, 1 / 3, 10e6, 10e-6, 1.175494351e-38, math.ulp(0.0),
        sys.float_info.min, sys.float_info.max, 3.402823466e38, 9007199254740992.0,
        1 - 10e-6, 2 + 10e-6, 1.192092896e-07, 2.2204460492503131e-016,
        2.0**-24, 2.0**-14, 2.0**-149, 2.0**-126,
        sys.float_info.min / 2, sys.float_info.min / 10, sys.float_info.min / 1000,
        sys.float_info.min / 100_000,
    )
    for sign in (1.0, -1.0)
)  # fmt: skip
COLUMNS = ("inflight", "running", "inflight_at_reading", "batch", "running_max",
           "batch_limit", "batch_floor", "batch_ceiling", "pending_prefill",
           "prefill_since", "prefill_ended", "probing", "probe_late")  # fmt: skip
CAPACITY = 20
HASHES = tuple(range(1, 13))
# Every float list is drawn as one byte string, CELL bytes a value (a choice byte, then the
# 8 bytes of the value), and read as the strategies the values follow would draw them:
#   plain = st.floats(0.0, 64.0) | st.integers(0, 40).map(float) | st.just(math.nan)
#   odd   = st.floats(allow_subnormal=True) | st.sampled_from(ODD)  (and NASTY, as above)
#   cells = st.one_of(plain, plain, plain, odd): mostly what a table holds (counts, NaN
#           unknowns), sometimes anything at all; `mixed` = st.one_of(plain, odd).
# One draw per list instead of ~4 per value: the same values at ~1/10 of hypothesis's cost
# (the parity tests spent ~95 % of their time drawing), so as many Picks in far less time.
# Shrinking still works: a string shrinks towards zeros, which read as plain 0.0.
CELL = 9


def _plain(choice: int, bits: int) -> float:
    kind = (choice >> 2) % 3
    if kind == 0:  # a float in [0, 64], its ends included
        return ((bits >> 10) % ((1 << 53) + 1)) / (1 << 53) * 64.0
    return float(bits % 41) if kind == 1 else math.nan


def _odd(choice: int, bits: int) -> float:
    kind = (choice >> 4) % 4
    if kind == 2:
        return ODD[bits % len(ODD)]
    if kind == 3:
        return NASTY[bits % len(NASTY)]
    return float(struct.unpack("<d", bits.to_bytes(8, "little"))[0])  # any bits: NaNs too


def _read(raw: bytes, odd_in: int) -> list[float]:
    """The values of `raw`: one in `odd_in` odd, the others plain."""
    values = []
    for at in range(0, len(raw), CELL):
        choice, bits = raw[at], int.from_bytes(raw[at + 1 : at + CELL], "little")
        odd = choice % odd_in == odd_in - 1
        values.append(_odd(choice, bits) if odd else _plain(choice, bits))
    return values


def float_lists(size: int, odd_in: int) -> st.SearchStrategy[list[float]]:
    """`size` values, one in `odd_in` odd (4: `cells`, 2: `mixed`)."""
    raw = st.binary(min_size=size * CELL, max_size=size * CELL)
    return raw.map(lambda drawn: _read(drawn, odd_in))


def columns() -> st.SearchStrategy[dict[str, list[float]]]:
    return st.fixed_dictionaries({name: float_lists(CAPACITY, 4) for name in COLUMNS})


@st.composite
def rate_arrays(draw: st.DrawFn) -> list[float] | None:
    if draw(st.booleans()):
        return None
    return draw(float_lists(draw(st.integers(0, 24)), 2))


configs = st.fixed_dictionaries({
    "prior_prefill_tokens_per_s": st.floats(1.0, 1e5),
    "prior_prefill_base_ms": st.floats(0.0, 100.0),
    "prior_service_ms": st.floats(1.0, 1e4),
    "prior_batch": st.floats(1.0, 64.0) | st.just(8.0),
    "prior_busy_ms_per_sequence": st.floats(0.0, 10.0),
    "decode_pressure_ms": st.floats(0.0, 100.0),
    "compute_weight": st.floats(0.0, 2.0),
    "cache_space_weight": st.floats(0.0, 2.0) | st.just(0.0),
    "queue_weight": st.floats(0.0, 2.0),
    "unsure_batch_weight": st.floats(0.0, 2.0),
    "blocking_weight": st.floats(0.0, 2.0) | st.just(0.0),
})  # fmt: skip


@st.composite
def picks(draw: st.DrawFn) -> dict[str, Any]:
    """Everything one Pick's TTFT terms read, drawn."""
    count = draw(st.integers(1, 16))
    maybe = float_lists(count, 2)
    return {
        "columns": draw(columns()),
        "waiting": draw(float_lists(CAPACITY, 4)),
        "slots": draw(st.lists(st.integers(0, CAPACITY - 1), min_size=count, max_size=count)),
        "rates": [draw(rate_arrays()) for _ in range(3)],
        "busy": draw(st.none() | st.floats(0.0, 50.0)),
        "config": draw(configs),
        "prompt": draw(st.floats(0.0, 1e5) | st.sampled_from([math.nan, math.inf, 7])),
        "cached": draw(maybe),
        "memory": draw(st.none() | st.tuples(maybe, maybe)),
        "footprint": draw(st.none() | maybe),
        "shared": draw(st.lists(st.integers(0, 12), max_size=4)),
        "hashes": draw(st.sampled_from([(), HASHES])),
        # the pool's ready slots the filters narrowed to `slots` (None: no filter did)
        "pool": draw(st.none() | st.lists(st.integers(0, CAPACITY - 1), max_size=CAPACITY)),
    }


def build(case: dict[str, Any]) -> tuple[PickContext, Rates, TtftConfig]:
    """The context, rates and config of a drawn Pick. Its clock moves 1 ms at each reading:
    a form reading it more often, or in another order, computes other values."""
    ticks = itertools.count()
    table = WorkerTable(capacity=CAPACITY, clock=lambda: 100.0 + next(ticks) / 1000.0)
    for name, values in case["columns"].items():
        setattr(table, name, np.array(values, dtype=np.float64))
    for index, shared in enumerate(case["shared"]):  # pending prefixes on the first slots
        mine = (*HASHES[:shared], 1000 + index)
        table.pending.add(case["slots"][0], index, PendingPrefix(mine, 0, 16.0 * len(mine), 16.0))
    rates = Rates()
    for name, values in zip(("prefill_ms_per_token", "prefill_base_ms", "service_ms"),
                            case["rates"], strict=True):  # fmt: skip
        if values is not None:
            rates._arrays[MODEL, name] = np.array(values, dtype=np.float64)
    if case["busy"] is not None:
        rates._busy[MODEL] = (1.0, 1.0, case["busy"])
    waiting = np.array(case["waiting"], dtype=np.float64)
    pool = case.get("pool")
    if pool is not None and not isinstance(pool, np.ndarray):
        pool = np.array(pool, dtype=np.intp)
    ctx = PickContext(
        request(), MODEL, "default/pool", table, Signals(waiting, waiting.copy()),
        np.array(case["slots"], dtype=np.intp), case["prompt"],
        np.array(case["cached"], dtype=np.float64), case["hashes"], pool,
        footprint=case["footprint"],
    )  # fmt: skip
    if case["memory"] is not None:
        ctx.memory_ahead, ctx.memory_batch = (list(values) for values in case["memory"])
    return ctx, rates, TtftConfig(**case["config"])


def bits(values: object) -> bytes:
    """The float64 values' bits, every NaN as one (which of two NaN operands an operation
    passes on is the compiler's choice, in CPython as here; no comparison sees it)."""
    array = np.asarray(values, dtype=np.float64)
    return np.where(np.isnan(array), np.nan, array).tobytes()


def run(scorer: TtftScorer, ctx: PickContext, scoring: bool) -> tuple[object, ...]:
    """What the small form answers and sets (bit for bit, -0.0 included: the sequences
    and the probes too), or the error's type."""
    try:
        if scoring:
            scores = scorer._score_small(ctx)
            assert ctx.predicted_ttft_ms is not None and ctx.predicted_wait_ms is not None
            answered = (scores, ctx.predicted_ttft_ms, ctx.predicted_wait_ms)
        else:
            answered = scorer._predict_small(ctx)
    except Exception as error:  # the type is what both must share
        return (type(error),)
    assert ctx.sequences is not None and ctx.probes is not None
    return (*(bits(array) for array in answered), bits(ctx.sequences), bits(ctx.probes))
