"""Estimated time to first token: one cost per candidate, in milliseconds.

    ttft = wait + prefill + busy + pressure
    wait     = max(ahead * service_ms / batch,  memory_ahead * service_ms / memory_batch)
               + max(pending - done, 0) * ms_per_token
    prefill  = base_ms + (prompt_tokens - cached_tokens) * ms_per_token
    busy     = busy_ms_per_sequence * min(sequences, batch)
    pressure = decode_pressure_ms * min(sequences / batch, 1) ** 2

`sequences` are what the worker runs and queues now: the engine's last reading (running +
waiting) carried forward by the picks and completions since, or the cluster-wide in-flight
picks when no fresh reading exists. `batch` is how many it runs at once (the pool's
`max_batch`, else seen in readings while requests waited, else learned: `WorkerTable.
occupancy`), `ahead` the sequences beyond it that the new request would queue behind (each
wait is a batch slot freed: `service_ms / batch` apart). `pending` are uncached prompt
tokens picked to the worker and still without a first token (a prefix this prompt shares
among them too: cached only once computed, `routing.pending`), `done` those of them
the engine has computed by now if it prefills them one after another from when its
pending prefill began (`routing.pending`). `busy` is what the running sequences add to
the request's own first step (each step decodes them beside its prefill). In precise
pools whose cache size is known, `memory_ahead` are the requests ahead that must end
before this one fits in the worker's KV cache and `memory_batch` how many then run at
once (`kvcache.memory`): with long prompts on small caches the engine's memory, not its
batch limit, makes requests wait.
`ms_per_token`, `base_ms`, and `service_ms` are learned per worker and model,
`busy_ms_per_sequence` per model (`routing.rates`); a worker not learned yet takes its
fellow candidates' mean, and the priors (`scorers.ttft_config`) apply while none is learned.

The score is `best / cost` (the cheapest candidate scores 1), with
`cost = ttft + (compute_weight + cache_space_weight * fullness) * prefill
+ queue_weight * slot_wait + blocking_weight * rate * prefill**2 / 2`
(`slot_wait = ahead * service_ms / batch`, or the wait for
memory where that is longer): a share of the compute the request takes from those after
it, so that at equal TTFT a cache hit wins; the cache space its new blocks take, dearer
where the cache is fuller (`fullness`: blocks the prefix index holds there over the most
any candidate holds), since they evict what others would reuse; behind a full batch, the
slot it then holds, which the requests after it there wait for (none where one is free);
and where the batch is not known, the expected such wait (`doubt.unseen_wait`); and the
wait its prefill imposes on the requests that reach the worker meanwhile (`rate`: the
worker's arrivals a millisecond by Little's law, `sequences / service_ms`; each waits half
of the prefill on average: engines prefill in turn).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from kinference.native import load_choose, load_ttft
from kinference.routing.doubt import (
    MOST_SEEN_FOR_DOUBT,
    needed_probes,
    probe_limit,
    unseen_waits,
)
from kinference.routing.pending import unwaited_prefill
from kinference.routing.plugins.base import PickContext
from kinference.routing.rates import Rates
from kinference.routing.scorers import ttft_small
from kinference.routing.scorers.ttft_config import TtftConfig
from kinference.routing.scorers.ttft_small import Rows, native_choice, native_terms, small_terms
from kinference.routing.table import FloatArray, IndexArray, WorkerTable


@dataclass(frozen=True, slots=True)
class Parts:
    """The prompt-independent terms per slot, milliseconds (and ms per uncached token)."""

    wait: FloatArray  # counting all pending prefill (`unwaited_prefill`: per prompt)
    slot_wait: FloatArray  # of it, for a batch slot (before any wait for memory)
    base: FloatArray
    per_token: FloatArray
    pressure: FloatArray  # with the busy term (both depend on the occupancy alone)
    sequences: FloatArray  # what each runs and queues now
    service: FloatArray  # ms a request holds a batch slot after its first token
    unsure: FloatArray  # the expected wait where the batch is not known (`unseen_wait`)
    probes: FloatArray  # 1.0 where joining is the pool's probe (`doubt.is_probe`)


# (predicted TTFT, its wait, own prefill, its slot wait, the unknown batch's expected wait)
Terms = tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]

# Up to this many candidates the terms are computed one by one (`ttft_small`, C or Python).
SMALL_CANDIDATES = 16


class TtftScorer:
    name: ClassVar[str] = "ttft"

    def __init__(self, config: TtftConfig, rates: Rates, *, native: bool = True) -> None:
        """`native`: the small form in C where it was built (`ttft_small`), else Python."""
        self.config = config
        self.rates = rates
        self._ms_per_token = 1000.0 / config.prior_prefill_tokens_per_s
        self._native = load_ttft() if native else None
        self._choose = load_choose() if native else None
        self._constants = ttft_small.constants(config, self._ms_per_token, self._unsure_share())

    def predict(self, ctx: PickContext) -> tuple[FloatArray, FloatArray]:
        """(predicted milliseconds to first token, of which waiting) on each candidate."""
        predicted, wait, _, _, _ = self._predict(ctx)
        return predicted, wait

    def _predict(self, ctx: PickContext) -> Terms:
        """(predicted TTFT, its wait, the request's own prefill, the wait's part for a
        batch slot) per candidate, ms."""
        if len(ctx.slots) <= SMALL_CANDIDATES:
            return self._predict_small(ctx)
        return self._predict_vector(ctx)

    def _predict_vector(self, ctx: PickContext, parts: Parts | None = None) -> Terms:
        if parts is None:
            parts = self.parts(ctx.table, ctx.slots, ctx.model, ctx.signals.waiting,
                               ctx.pool_slots)  # fmt: skip
        uncached = np.maximum(ctx.prompt_tokens - ctx.cached_tokens, 0.0)
        prefill = uncached * parts.per_token
        gone = unwaited_prefill(ctx.table, ctx.slots, parts.per_token)
        wait = parts.wait - gone * parts.per_token
        slot_wait = parts.slot_wait
        if ctx.memory_ahead is not None and ctx.memory_batch is not None:
            memory = np.asarray(ctx.memory_ahead) * parts.service / np.asarray(ctx.memory_batch)
            wait = wait + np.maximum(memory - slot_wait, 0.0)
            slot_wait = np.maximum(slot_wait, memory)  # the wait for a place to run
        predicted: FloatArray = wait + parts.base + prefill + parts.pressure
        unsure, probes = parts.unsure, parts.probes
        if probes.any():
            listed, doubts = probes.tolist(), unsure.tolist()
            needed_probes(listed, prefill.tolist(), slot_wait.tolist(), doubts)
            unsure, probes = np.array(doubts), np.array(listed)
        ctx.sequences, ctx.probes = parts.sequences, probes
        return predicted, wait, prefill, slot_wait, unsure

    def _predict_small(self, ctx: PickContext) -> Terms:
        """`_predict` on Python floats, for a handful of candidates (numpy's fixed cost per
        call is then the larger one); the same formulas, so the same values."""
        rows = self._native_rows(ctx, scoring=False)
        if rows is not None:
            predicted, wait, prefill, slot_wait, unsure, ctx.sequences, _ = rows
            return predicted, wait, prefill, slot_wait, unsure
        terms = small_terms(self.config, self.rates, self._ms_per_token, ctx)
        predicted, wait, prefill, slot_wait, unsure = (np.array(term) for term in terms[:5])
        return predicted, wait, prefill, slot_wait, unsure

    def _native_rows(self, ctx: PickContext, *, scoring: bool) -> Rows | None:
        """`ttft_small.native_terms`'s rows, None where it is not built or not taken."""
        if self._native is None:
            return None
        busy = self.rates.busy_ms(ctx.model, self.config.prior_busy_ms_per_sequence)
        return native_terms(self._native, self._constants, busy, self.rates, ctx,
                            scoring=scoring)  # fmt: skip

    def choose_small(
        self, ctx: PickContext, weight: float, home: int | None, ids: object,
        guard: tuple[object, object, float, float, float] | None = None,
    ) -> tuple[int, FloatArray] | None:  # fmt: skip
        """A small pool's scores and choice in one C call, when this scorer is the only one
        answering (`Pipeline.choose`): `ttft_small.native_choice`; None where it is not
        built or does not take the arguments."""
        if self._choose is None or len(ctx.slots) > SMALL_CANDIDATES:
            return None
        busy = self.rates.busy_ms(ctx.model, self.config.prior_busy_ms_per_sequence)
        return native_choice(self._choose, self._constants, busy, self.rates, ctx,
                             weight=weight, home=home, ids=ids, guard=guard)  # fmt: skip

    def parts(
        self, table: WorkerTable, slots: IndexArray, model: str, waiting: FloatArray,
        pool: IndexArray | None = None,
    ) -> Parts:  # fmt: skip
        """The terms of the model that do not depend on the prompt, per slot (`pool`: the
        ready workers the filters narrowed to `slots`, whose batch evidence counts too)."""
        config, rates, size = self.config, self.rates, len(table.inflight)
        per_token = _peers_or(rates.values(model, "prefill_ms_per_token", slots, size),
                              self._ms_per_token)  # fmt: skip
        base = _peers_or(rates.values(model, "prefill_base_ms", slots, size),
                         config.prior_prefill_base_ms)  # fmt: skip
        service = _peers_or(rates.values(model, "service_ms", slots, size),
                            config.prior_service_ms)  # fmt: skip
        busy = rates.busy_ms(model, config.prior_busy_ms_per_sequence)
        pool = slots if pool is None else pool
        peer = table.peer_batch(pool)
        sequences, batch = table.occupancy(slots, waiting, config.prior_batch, peer)
        ahead = np.maximum(sequences + 1.0 - batch, 0.0)
        slot_wait = ahead * service / batch
        wait = slot_wait + table.pending_prefill[slots] * per_token  # less `unwaited_prefill`
        pressure = config.decode_pressure_ms * np.minimum(sequences / batch, 1.0) ** 2
        pressure = pressure + busy * np.minimum(sequences, batch)
        most_seen = table.most_seen(pool) if pool is not slots else None
        most = np.where(ahead > 0.0, np.nan, table.unsure(slots, peer, most_seen))
        joined = sequences + 1.0
        limit = probe_limit(table.probing, table.probe_late, pool.tolist())
        probe = (most >= MOST_SEEN_FOR_DOUBT) & (most < joined) & (joined <= most + 1.0)
        probes = (probe & (joined < limit)).astype(np.float64)  # `doubt.is_probe`
        unsure = unseen_waits(joined, most, batch, service)
        return Parts(wait, slot_wait, base, per_token, pressure, sequences, service, unsure,
                     probes)  # fmt: skip

    def score(self, ctx: PickContext) -> FloatArray:
        """`best / cost`, the cost being the predicted TTFT plus `compute_weight` (and
        `cache_space_weight` times the cache's fullness) of the request's own prefill and
        `queue_weight` of its wait for a batch slot (milliseconds all)."""
        if len(ctx.slots) <= SMALL_CANDIDATES:  # Python floats: a few numpy calls fewer
            return self._score_small(ctx)
        parts = self.parts(ctx.table, ctx.slots, ctx.model, ctx.signals.waiting,
                           ctx.pool_slots)  # fmt: skip
        terms = self._predict_vector(ctx, parts)
        predicted, ctx.predicted_wait_ms, prefill, slot_wait, unsure = terms
        ctx.predicted_ttft_ms = predicted
        weight, space, footprint = (
            self.config.compute_weight,
            self.config.cache_space_weight,
            ctx.footprint,
        )
        share: FloatArray | float = weight
        if footprint is not None and space > 0.0 and (most := max(footprint)) > 0.0:
            share = weight + space * np.asarray(footprint) / most
        queued = self.config.queue_weight * slot_wait + self._unsure_share() * unsure
        arrivals = np.where(parts.service > 0.0, parts.sequences / parts.service, 0.0)
        blocking = self.config.blocking_weight * arrivals * prefill * prefill / 2.0
        cost = np.maximum(predicted + share * prefill + queued + blocking, 1.0)
        return float(cost.min()) / cost

    def _score_small(self, ctx: PickContext) -> FloatArray:
        rows = self._native_rows(ctx, scoring=True)
        if rows is not None:
            ctx.predicted_ttft_ms, ctx.predicted_wait_ms, *_, ctx.sequences, scores = rows
            return scores
        small = small_terms(self.config, self.rates, self._ms_per_token, ctx)
        predicted, wait, owns, slot_wait, unsure, arrivals = small
        ctx.predicted_ttft_ms, ctx.predicted_wait_ms = np.array(predicted), np.array(wait)
        weight, space, footprint = (
            self.config.compute_weight,
            self.config.cache_space_weight,
            ctx.footprint,
        )
        shares = [weight] * len(owns)
        if footprint is not None and space > 0.0 and (most := max(footprint)) > 0.0:
            shares = [weight + space * blocks / most for blocks in footprint]
        queued, doubt = self.config.queue_weight, self._unsure_share()
        block = self.config.blocking_weight
        terms = zip(predicted, owns, shares, slot_wait, unsure, arrivals, strict=True)
        costs = [max(ttft + share * own + queued * slot + doubt * unsure_ms
                     + block * rate * own * own / 2.0, 1.0)
                 for ttft, own, share, slot, unsure_ms, rate in terms]  # fmt: skip
        best = min(costs)
        return np.array([best / cost for cost in costs])

    def _unsure_share(self) -> float:
        """Cost per ms of an unknown batch's expected wait: its own and the slot it holds."""
        return self.config.unsure_batch_weight * (1.0 + self.config.queue_weight)


def _peers_or(values: FloatArray, prior: float) -> FloatArray:
    """Unlearned values as the candidates' learned mean, or the prior when none is learned:
    a worker not tried yet is taken to be like its peers, neither shunned (a pessimistic
    prior would never let it be tried) nor favoured."""
    unknown = np.isnan(values)
    if not unknown.any():
        return values
    if unknown.all():
        return np.full(len(values), prior)
    return np.where(unknown, float(values[~unknown].mean()), values)
