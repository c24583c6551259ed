"""What the router learns from picks, reports and the other replicas' events.

Feedback in, state out: the worker table's latency estimates and pending prefill, the
learned rates of the TTFT model, the prefix index (recorded at pick, corrected by reported
`cached_tokens`) and the prediction-quality windows. Every report this replica handles is
also put in the journal, so the other replicas learn the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import floor, isnan

from kinference.routing.decision import LocalChoice
from kinference.routing.journal import Journal
from kinference.routing.pending import PendingPrefix
from kinference.routing.prefix import PrefixIndex
from kinference.routing.quality import PredictionQuality
from kinference.routing.rates import Rates
from kinference.routing.samples import is_prompt_sample
from kinference.routing.table import WorkerTable
from kinference.routing.textsize import TextSize

# A prefill sample is taken when the predicted wait was under this share of the observed
# TTFT: the rest is then mostly the request's own prefill.
PREFILL_SAMPLE_WAIT_SHARE = 0.5
# A first token within this share over the predicted TTFT without wait (plus a slack for
# the picker's and gateway's own latency, ms) found no queue; one later than the predicted
# TTFT plus the larger of that again and the queue slack, ms, waited for a batch slot.
NO_QUEUE_SHARE, NO_QUEUE_SLACK_MS = 0.5, 50.0
QUEUED_SLACK_MS = 250.0
# Another replica's prefill whose end never reached us (an entry lost to a trim or a gap)
# stops counting after this many seconds; prefills take well under that.
REMOTE_PREFILL_TTL_S = 30.0
# A report teaches characters per token only when the prompt's text is at least this share
# of its reported tokens (the rest, fixed estimates of overheads and media, is a guess).
TEXT_SHARE_FOR_SAMPLE = 0.5


def missing_age(held_age: int | None, held_blocks: int, kept: int) -> int | None:
    """The age at the pick (distinct blocks recorded on the worker since) of the first block a
    report found missing, from the deepest held block's: a prefix is recorded deepest block
    first, so each shallower block is one younger (or younger still, refreshed since by a
    shorter prompt: the bound then errs high, never low). An LRU cache that lost it holds
    fewer blocks than that; the deepest block's own age overstated it by the prompt's
    length (h103: 4 documents' worth where the engine held 2.5)."""
    if held_age is None:
        return None
    return max(held_age - max(held_blocks - 1 - kept, 0), 0)


@dataclass(frozen=True, slots=True)
class Served:
    """A finished request as ReportFinalToken and the picker's clock saw it."""

    prompt_tokens: int
    cached_tokens: int | None
    itl_bucket_counts: tuple[int, ...]
    ttft_ms: float | None  # reported at ReportFirstToken; None if none came
    service_ms: float | None  # first token to final report, on this replica's clock


class Learning:
    def __init__(self, table: WorkerTable, prefix: PrefixIndex, journal: Journal) -> None:
        self.table = table
        self.prefix = prefix
        self.journal = journal
        self.rates = Rates()  # the TTFT model's defaults until the policy's (`compile_policy`)
        self.text = TextSize()  # characters per token per model
        self.quality = PredictionQuality.empty()
        self.block_bytes = 64  # of the policy in force (set by the router on reload)
        # Other replicas' prefills in progress: (instance, pick) -> (slot, deadline), in
        # the order they started (deadlines too: one TTL for all).
        self._remote: dict[tuple[str, int], tuple[int, float]] = {}

    def picked(self, choice: LocalChoice) -> None:
        if choice.hashes:  # applied once the answer is on its way (`PrefixIndex.flush`)
            self.prefix.record_later(choice.slot, choice.hashes)
        entry = PendingPrefix(
            choice.hashes, choice.held_blocks, choice.uncached_tokens,
            self._tokens_per_block(choice, choice.prompt_tokens),
        )  # fmt: skip
        self.table.start_prefill(choice.slot, id(choice), entry)
        if choice.probe:
            self.table.start_probe(choice.slot, id(choice))
        self.journal.prefilling(choice.endpoint, id(choice), choice.held_blocks,
                                entry.tokens, entry.block_tokens)  # fmt: skip

    def first_token(self, choice: LocalChoice, ttft_ms: float) -> None:
        self.prefill_over(choice)
        self.table.observe_ttft(choice.slot, choice.model, ttft_ms)
        self.journal.first_token(choice.endpoint, choice.model, ttft_ms)
        if choice.predicted_ttft_ms is not None:
            self.quality.ttft_ms.add(choice.predicted_ttft_ms, ttft_ms)
            self._batch_evidence(choice, ttft_ms, missed=choice.cached_tokens)

    def _batch_evidence(self, choice: LocalChoice, ttft_ms: float, missed: float) -> bool:
        """Whether the request queued at the occupancy it joined (True: it did) tells the
        worker's batch: a ceiling one below, or without readings the floor. A first token
        late by no more than the prefill of `missed` tokens (of those predicted cached, the
        ones the engine may not have had: at the first token all, at the final report those
        it reported missing) is no queue. With readings the running count is the floor,
        and they show a full batch only after a standing queue (`table.FULL_AFTER_S`): on
        engines of 4 slots a queue drains sooner, a batch of 8 was assumed, and picks
        queued there for a second while the model predicted none (few-slots, 18 req/s).
        A first token on time with none ended on the worker since the pick raises the
        floor with readings too: it ran beside all it joined, which a reading 0.2 s later
        may no longer show (one ended meanwhile), and until the floor rises every request
        past it pays the unknown batch's doubt (vllm-64: hits sent cold within 0.1-0.8 s
        of one that joined as many on time). A slot freed in between proves nothing."""
        slot, predicted = choice.slot, choice.predicted_ttft_ms
        if predicted is None or choice.sequences < 1.0:
            return False
        readings = not isnan(self.table.scraped_at.item(slot))
        unqueued = max(predicted - choice.predicted_wait_ms, 0.0)
        if ttft_ms <= unqueued * (1.0 + NO_QUEUE_SHARE) + NO_QUEUE_SLACK_MS:
            held = self.table.ended.item(slot) == choice.ended_before  # NaN: not read
            floor = held or not readings
            self.table.observed_batch(slot, choice.sequences, queued=False, floor=floor)
            return False
        if choice.probe:  # not on time: the pool probes this far no more
            self.table.probe_came_late(slot, choice.sequences)
        unqueued += max(missed, 0.0) * self.rates.ms_per_token(slot, choice.model)
        if choice.sequences >= 2.0 and ttft_ms > unqueued + choice.predicted_wait_ms + max(
            unqueued, QUEUED_SLACK_MS
        ):  # (alone on the worker it queued behind nothing: a slow engine, not a queue)
            self.table.observed_batch(slot, choice.sequences, queued=True)
            return True
        return False

    def released_before_first_token(self, choice: LocalChoice) -> None:
        self.prefill_over(choice)

    def prefill_over(self, choice: LocalChoice) -> None:
        """The pick's prefill is done or abandoned (again: a no-op)."""
        self.table.end_probe(id(choice))
        if self.table.end_prefill(choice.slot, id(choice)):
            self.journal.prefilled(choice.endpoint, id(choice))

    def final(self, choice: LocalChoice, served: Served) -> None:
        slot, model = choice.slot, choice.model
        if served.itl_bucket_counts:
            self.table.observe_itl(slot, model, served.itl_bucket_counts)
            self.journal.itl(choice.endpoint, model, served.itl_bucket_counts)
        self._text_sample(choice, served.prompt_tokens)
        uncached = choice.uncached_tokens
        if served.cached_tokens is not None and served.prompt_tokens > 0:
            cached = min(served.cached_tokens, served.prompt_tokens)
            uncached = float(served.prompt_tokens - cached)
            self._cached_feedback(choice, served.prompt_tokens, cached)
        prefill_ms = float("nan")
        ttft = served.ttft_ms
        if (
            ttft is not None
            and is_prompt_sample(served.prompt_tokens, choice.prompt_tokens, choice.fixed_tokens)
            and not self._queued(choice, ttft, served)
            and choice.predicted_wait_ms <= PREFILL_SAMPLE_WAIT_SHARE * ttft
        ):
            prefill_ms = self._unqueued(choice, uncached, ttft - choice.predicted_wait_ms)
        service_ms = float("nan") if served.service_ms is None else served.service_ms
        self.learn(slot, model, uncached, prefill_ms, service_ms)
        self.journal.served(choice.endpoint, model, uncached, prefill_ms, service_ms)

    def _queued(self, choice: LocalChoice, ttft_ms: float, served: Served) -> bool:
        """`_batch_evidence` again, knowing what the engine reported cached: a request
        found to have queued is no prefill sample either."""
        missed = choice.cached_tokens
        if served.cached_tokens is not None:
            missed -= min(served.cached_tokens, served.prompt_tokens)
        return self._batch_evidence(choice, ttft_ms, missed)

    def _unqueued(self, choice: LocalChoice, uncached: float, unqueued_ms: float) -> float:
        """A TTFT without its predicted queue: teaches what the sequences beside it added
        (beyond the learned prefill), and is the prefill sample net of that."""
        slot, model = choice.slot, choice.model
        beside = max(choice.sequences - 1.0, 0.0)  # the sequences it joined, not itself
        busy = self.rates.busy_ms(model) * beside
        if beside >= 1.0:
            prefill = self.rates.prefill_ms(slot, model, uncached)
            excess = unqueued_ms - prefill
            if not isnan(prefill) and self.rates.observe_busy(model, beside, excess):
                self.journal.busy(choice.endpoint, model, beside, excess)
        return max(unqueued_ms - busy, 0.0)

    def _text_sample(self, choice: LocalChoice, prompt_tokens: int) -> None:
        """The reported prompt tokens against the text measured at Pick."""
        tokens = prompt_tokens - choice.fixed_tokens
        if not choice.text_chars or tokens < TEXT_SHARE_FOR_SAMPLE * prompt_tokens:
            return
        if self.text.observe(choice.model, choice.text_chars, tokens):
            self.journal.text(choice.endpoint, choice.model, choice.text_chars, tokens)

    def learn(
        self, slot: int, model: str, uncached: float, prefill_ms: float, service_ms: float
    ) -> None:
        """Fold one served request into the rates (NaN: that part was not measured)."""
        if not isnan(prefill_ms):
            self.rates.observe_prefill(slot, model, uncached, prefill_ms)
        if not isnan(service_ms):
            self.rates.observe_service(slot, model, service_ms)

    def _cached_feedback(self, choice: LocalChoice, prompt_tokens: int, cached: int) -> None:
        """Predicted against reported cached tokens; a shortfall teaches the index."""
        predicted = min(choice.cached_tokens, float(prompt_tokens))
        self.quality.cached_tokens.add(predicted, float(cached))
        if not choice.hashes or not choice.held_blocks or not choice.settled:
            return  # nothing held, or held blocks perhaps still being prefilled
        per_block = self._tokens_per_block(choice, prompt_tokens)
        kept = min(floor(cached / per_block), len(choice.hashes))
        if kept < choice.held_blocks - 1:  # a block's rounding is no shortfall
            age = missing_age(choice.held_age, choice.held_blocks, kept)
            self.prefix.shortfall(choice.slot, choice.hashes, kept, age)
            self.journal.shortfall(choice.endpoint, choice.hashes, kept, age)
        else:
            self.prefix.confirmed(choice.slot, choice.held_age)
            self.journal.confirmed(choice.endpoint, choice.held_age)

    def _tokens_per_block(self, choice: LocalChoice, prompt_tokens: float) -> float:
        block_tokens = self.block_bytes / self.text.chars_per_token(choice.model)
        whole = prompt_tokens / max(len(choice.hashes), 1)
        return max(min(whole, block_tokens) if whole > 0 else block_tokens, 1e-9)

    def remote_prefilling(
        self, instance: str, slot: int, pick: int, entry: PendingPrefix, now: float
    ) -> None:
        """Another replica's pick prefills on `slot` (shared as ours are)."""
        self._expire(now)
        key = (instance, pick)
        known = self._remote.pop(key, None)
        if known is not None:  # its id again (reused): the end of the one it named was lost
            self.table.end_prefill(known[0], key)
        self.table.start_prefill(slot, key, entry)
        self._remote[key] = (slot, now + REMOTE_PREFILL_TTL_S)

    def remote_prefilled(self, instance: str, slot: int, pick: int) -> None:
        key = (instance, pick)
        self._remote.pop(key, None)
        self.table.end_prefill(slot, key)

    def remote_gone(self, instance: str) -> None:
        """A replica left: its prefills in progress no longer count."""
        for key in [key for key in self._remote if key[0] == instance]:
            self.table.end_prefill(self._remote.pop(key)[0], key)

    def _expire(self, now: float) -> None:
        while self._remote:
            key, (slot, deadline) = next(iter(self._remote.items()))
            if deadline > now:
                return
            del self._remote[key]
            self.table.end_prefill(slot, key)

    def forget(self, slot: int) -> None:
        self.prefix.forget(slot)
        self.rates.forget(slot)
        self.table.forget_batch(slot)
        self.table.forget_latency(slot)
