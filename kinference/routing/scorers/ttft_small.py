"""The TTFT model's small-candidate form: its terms for a handful of candidates, on Python
floats (numpy's fixed cost per call is then the larger one), and the same in C.

`small_terms` is the reference: `ttft.TtftScorer._predict_vector`'s formulas (module
`ttft`), candidate by candidate, on the worker table's and the rates' values read one at
a time. `native_terms` runs `kinference.native._ttft.terms`, which computes the same
values bit for bit (the same float operations in the same order; tests/native hold it to
`small_terms` and to the scorer's `_score_small`), reading those arrays through the buffer
protocol rather than as Python floats (`waited_prefill` and `WorkerTable.prefill_done`
spelled there too), and scores too when asked.
`TtftScorer` chooses (`native=False` forces the reference).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from kinference.routing import doubt, readings
from kinference.routing.doubt import MOST_SEEN_FOR_DOUBT, unseen_wait
from kinference.routing.pending import waited_prefill
from kinference.routing.rates import Rates
from kinference.routing.table import FloatArray

if TYPE_CHECKING:
    from kinference.routing.plugins.base import PickContext
    from kinference.routing.scorers.ttft_config import TtftConfig

Lists = tuple[list[float], list[float], list[float], list[float], list[float], list[float]]
# `native_terms`' answer: predicted, wait, prefill, slot_wait, unsure, sequences, score
# (`ctx.probes` set).
Rows = tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]
NativeTerms = Callable[..., object]
_UNGUARDED = (None, None, 0.0, 0.0, 0.0)  # `native_choice` without the saturation check


def constants(config: TtftConfig, ms_per_token: float, unsure_share: float) -> tuple[float, ...]:
    """The settings `native_terms` reads (the order of `Constants` in ttft_args.h);
    `unsure_share`: the scorer's cost per ms of an unknown batch's expected wait."""
    values = (
        ms_per_token, config.prior_prefill_base_ms, config.prior_service_ms,
        config.prior_batch, config.decode_pressure_ms, config.compute_weight,
        config.cache_space_weight, config.queue_weight, unsure_share, config.blocking_weight,
    )  # fmt: skip
    return tuple(float(value) for value in values)


def native_terms(
    terms: NativeTerms, settings: tuple[float, ...], busy: float, rates: Rates,
    ctx: PickContext, *, scoring: bool,
) -> Rows | None:  # fmt: skip
    """`Rows` per candidate (the score only when `scoring`), by the C form; None where it
    does not take the arguments (run the pure form). `busy`: `rates.busy_ms` of the model
    with the config's prior."""
    out = np.empty((8, len(ctx.slots)))
    done = terms(*_arguments(out, settings, busy, rates, ctx), scoring, ctx.pool_slots)
    if done is NotImplemented:
        return None
    predicted, wait, prefill, slot_wait, unsure, sequences, score, ctx.probes = out
    return predicted, wait, prefill, slot_wait, unsure, sequences, score


def native_choice(
    choose: NativeTerms, settings: tuple[float, ...], busy: float, rates: Rates,
    ctx: PickContext, *, weight: float, home: int | None, ids: object,
    guard: tuple[object, object, float, float, float] | None,
) -> tuple[int, FloatArray] | None:  # fmt: skip
    """`_ttft.choose`: the terms and scores (`native_terms`' with `scoring`, set on `ctx`
    as `TtftScorer.score` sets them) and the choice among the candidates when this scorer
    is the only one answering, `weight` its weight: (the index, or -1 where the picker
    must choose, or -2 where `guard` (the queues, KV-cache use, queue depth, KV-cache
    threshold and own-hit tokens of the saturation filter) finds a candidate saturated,
    before anything is computed; and the weighted totals); None where the C form does not
    take the arguments (nothing computed: run the pipeline)."""
    out = np.empty((8, len(ctx.slots)))
    arguments = _arguments(out, settings, busy, rates, ctx)
    index = choose(*arguments, True, ctx.pool_slots, weight, home, ids, *(guard or _UNGUARDED))
    if not isinstance(index, int):
        return None
    if index == -2:
        return index, out[6]
    ctx.predicted_ttft_ms, ctx.predicted_wait_ms, _, _, _, ctx.sequences, totals, ctx.probes = out
    return index, totals


def _arguments(
    out: FloatArray, settings: tuple[float, ...], busy: float, rates: Rates, ctx: PickContext
) -> tuple[object, ...]:
    """`_ttft.terms`' arguments but the last two (`scoring`, the pool's slots), `_ttft.choose`'s
    first 15."""
    table, model = ctx.table, ctx.model
    return (
        out, ctx.slots, ctx.cached_tokens, ctx.signals.waiting, table,
        rates.peek(model, "prefill_ms_per_token"), rates.peek(model, "prefill_base_ms"),
        rates.peek(model, "service_ms"), settings, busy, ctx.prompt_tokens,
        ctx.memory_ahead, ctx.memory_batch, ctx.footprint, table.clock,
    )  # fmt: skip


def small_terms(config: TtftConfig, rates: Rates, ms_per_token: float, ctx: PickContext) -> Lists:
    """(predicted TTFT, its wait, own prefill, slot wait, the unknown batch's expected wait,
    arrivals a millisecond by Little's law: sequences / service_ms) per candidate as lists;
    sets `ctx.sequences`."""
    table, model = ctx.table, ctx.model
    slots = ctx.slots.tolist()
    per_token = _small_peers_or(rates.peek(model, "prefill_ms_per_token"), slots,
                                ms_per_token)  # fmt: skip
    base = _small_peers_or(rates.peek(model, "prefill_base_ms"), slots,
                           config.prior_prefill_base_ms)  # fmt: skip
    service = _small_peers_or(rates.peek(model, "service_ms"), slots,
                              config.prior_service_ms)  # fmt: skip
    busy = rates.busy_ms(model, config.prior_busy_ms_per_sequence)
    pending, waiting = table.pending_prefill, ctx.signals.waiting
    full = config.decode_pressure_ms
    prompt, cached = ctx.prompt_tokens, ctx.cached_tokens.tolist()
    memory, fits = ctx.memory_ahead, ctx.memory_batch
    predicted, wait, prefill, occupied, slot_wait = [], [], [], [], []
    unsure: list[float] = []
    arrivals: list[float] = []
    rows = table.batch_rows(slots)  # read once for the occupancy and the doubt
    ready = slots if ctx.pool_slots is None else ctx.pool_slots.tolist()  # the pool's
    known = rows if ctx.pool_slots is None else table.batch_rows(ready)
    pool, peer = readings.most_seen_of_rows(known), readings.peer_batch_of_rows(known)
    limit, probes = doubt.probe_limit(table.probing, table.probe_late, ready), [0.0] * len(slots)
    prior = config.prior_batch
    for i, slot in enumerate(slots):
        row = rows[i]
        sequences, batch = table.occupancy_of_row(slot, row, waiting.item(slot), prior, peer)
        ahead = max(sequences + 1.0 - batch, 0.0)
        queued = pending.item(slot)
        if queued > 0.0:
            queued = waited_prefill(table, slot, queued, per_token=per_token[i])
        for_slot = ahead * service[i] / batch
        if memory is not None and fits is not None:  # a place to run: slot and memory
            for_slot = max(for_slot, memory[i] * service[i] / fits[i])
        waited = for_slot + queued * per_token[i]
        own = max(prompt - cached[i], 0.0) * per_token[i]
        pressure = full * min(sequences / batch, 1.0) ** 2 + busy * min(sequences, batch)
        predicted.append(waited + base[i] + own + pressure)
        wait.append(waited)
        prefill.append(own)
        occupied.append(sequences)
        slot_wait.append(for_slot)
        arrivals.append(sequences / service[i] if service[i] > 0.0 else 0.0)
        joined, most = sequences + 1.0, math.nan
        if ahead == 0.0:
            most = readings.unsure_of_row(row, peer, pool)
        if doubt.is_probe(joined, most, limit):
            probes[i] = 1.0
        # (`unseen_wait` is 0 unless this holds: its call then saved)
        if most >= MOST_SEEN_FOR_DOUBT and not joined <= most:
            unsure.append(unseen_wait(joined, most, batch, service[i]))
        else:
            unsure.append(0.0)
    if any(probes):
        doubt.needed_probes(probes, prefill, slot_wait, unsure)
    ctx.sequences, ctx.probes = np.array(occupied), np.array(probes)
    return predicted, wait, prefill, slot_wait, unsure, arrivals


def _small_peers_or(array: FloatArray | None, slots: list[int], prior: float) -> list[float]:
    """`ttft._peers_or` over the slots' values of `array` (None: nothing learned yet)."""
    if array is None:
        return [prior] * len(slots)
    size = len(array)
    values = [array.item(slot) if slot < size else math.nan for slot in slots]
    if not math.isnan(sum(values)):  # no NaN among them (one NaN makes the sum NaN)
        return values  # (a NaN sum of none, inf - inf, goes on to the test below)
    known = [value for value in values if not math.isnan(value)]
    if len(known) == len(values):
        return values
    fill = sum(known) / len(known) if known else prior
    return [fill if math.isnan(value) else value for value in values]
