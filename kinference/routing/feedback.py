"""The Router's feedback: reports, engine readings and other replicas' events, the only
ways routing state (the worker table, the prefix index, the learned rates) changes.

A mixin of `Router` (`kinference.routing.router`), which owns that state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kinference.routing.decision import LocalChoice
from kinference.routing.features import EngineReading
from kinference.routing.learning import Learning, Served
from kinference.routing.pending import PendingPrefix
from kinference.routing.policy import RoutingPolicy
from kinference.routing.prefix import PrefixIndex
from kinference.routing.prefix_capacity import blocks_of_tokens
from kinference.routing.table import WorkerTable


class RouterFeedback:
    """What reports and readings tell the Router (its state is `Router`'s)."""

    table: WorkerTable
    prefix: PrefixIndex
    learning: Learning
    policy: RoutingPolicy
    _clock: Callable[[], float]

    def picked(self, choice: LocalChoice) -> None:
        """The service dispatched `choice` (its load is counted by InFlight)."""
        self.learning.picked(choice)

    def first_token(self, choice: LocalChoice, ttft_ms: float) -> None:
        if self._left(choice):  # its prefill is over all the same
            self.learning.released_before_first_token(choice)
            return
        self.learning.first_token(choice, ttft_ms)

    def first_token_failed(self, choice: LocalChoice) -> None:
        """The first report carried an upstream error: no prefill is pending any more."""
        self.learning.released_before_first_token(choice)

    def final(self, choice: LocalChoice, served: Served) -> None:
        if not self._left(choice):
            self.learning.final(choice, served)

    def _left(self, choice: LocalChoice) -> bool:
        """Whether the chosen worker left every pool since the Pick: what was learned of it
        is forgotten then (`Router.reload`), and a late report must not teach its slot
        again (a pod that comes back at the same address is another engine)."""
        return not self.policy.catalog.models_of(choice.endpoint)

    def engine_reading(self, endpoint: str, ready: bool, reading: EngineReading | None) -> None:
        """An engine's readiness and metrics (None: unknown), from a scrape here or the
        scrape leader's reading in a cluster. A worker in no pool here and without a slot
        (another pool's on a shared stream, a pod gone here already) is left unread: its
        reading would take a slot until the next reload; once it joins a pool, its next
        reading (at most a refresh later) is read."""
        slot = self.table.find(endpoint)
        if slot is None:
            if not self.policy.catalog.models_of(endpoint):
                return
            slot = self.table.slot(endpoint)
        self.table.set_ready(slot, ready)
        if reading is None:
            self.table.set_engine(slot, waiting=None, running=None, kv_usage=None)
            return
        self.table.set_engine(
            slot,
            waiting=reading.waiting,
            running=reading.running,
            kv_usage=reading.kv_usage,
            adapters=reading.adapters,
            scraped_at=reading.scraped_at,
        )
        if reading.kv_capacity_tokens is not None:  # unknown: what was read stays
            self._engine_capacity(endpoint, slot, reading.kv_capacity_tokens)

    def _engine_capacity(self, endpoint: str, slot: int, tokens: float) -> None:
        """The engine's KV-cache size, in the prefix index's blocks (converted at every
        reading: the characters per token it takes are learned as reports come)."""
        text, models = self.learning.text, self.policy.catalog.models_of(endpoint)
        ratios = [text.chars_per_token(model) for model in models] or [text.prior]
        blocks = blocks_of_tokens(tokens, ratios, self.learning.block_bytes)
        if blocks is not None:
            self.prefix.report(slot, blocks)

    def remote_picked(self, endpoint: str, hashes: Sequence[int]) -> None:
        """Another replica sent a request with these prefix blocks to `endpoint`."""
        if hashes:
            self.prefix.record(self.table.slot(endpoint), hashes)

    def remote_prefilling(
        self, instance: str, endpoint: str, pick: int, entry: PendingPrefix
    ) -> None:
        """Another replica's pick on `endpoint` prefills there until `remote_prefilled`."""
        slot = self.table.slot(endpoint)
        self.learning.remote_prefilling(instance, slot, pick, entry, self._clock())

    def remote_prefilled(self, instance: str, endpoint: str, pick: int) -> None:
        self.learning.remote_prefilled(instance, self.table.slot(endpoint), pick)

    def remote_gone(self, instance: str) -> None:
        """A replica left the cluster: what it had in progress no longer counts."""
        self.learning.remote_gone(instance)

    def remote_shortfall(
        self, endpoint: str, hashes: tuple[int, ...], kept: int, age: int | None
    ) -> None:
        """Another replica learned that `endpoint` evicted blocks of `hashes`."""
        self.prefix.shortfall(self.table.slot(endpoint), hashes, max(kept, 0), age)

    def remote_confirmed(self, endpoint: str, age: int | None) -> None:
        self.prefix.confirmed(self.table.slot(endpoint), age)

    def remote_load(self, endpoint: str, delta: int) -> None:
        """Another replica's requests in flight on `endpoint` changed by `delta`."""
        self.table.add_inflight(self.table.slot(endpoint), delta)

    def remote_first_token(self, endpoint: str, model: str, ttft_ms: float) -> None:
        if self._serves(endpoint, model):
            self.table.observe_ttft(self.table.slot(endpoint), model, ttft_ms)

    def remote_itl(self, endpoint: str, model: str, counts: tuple[int, ...]) -> None:
        if self._serves(endpoint, model):
            self.table.observe_itl(self.table.slot(endpoint), model, counts)

    def remote_served(
        self, endpoint: str, model: str, uncached: float, prefill_ms: float, service_ms: float
    ) -> None:
        if self._serves(endpoint, model):
            slot = self.table.slot(endpoint)
            self.learning.learn(slot, model, uncached, prefill_ms, service_ms)

    def remote_text(self, endpoint: str, model: str, chars: float, tokens: float) -> None:
        """Another replica's sample of `model`'s characters per token (`endpoint` served
        it; the ratio is the model's, whoever serves it)."""
        if self._serves(endpoint, model):
            self.learning.text.observe(model, chars, tokens)

    def remote_busy(self, endpoint: str, model: str, sequences: float, excess_ms: float) -> None:
        """Another replica's sample of `model`'s busy cost (`endpoint` served it; the
        cost is the model's engines', whichever served it)."""
        if self._serves(endpoint, model):
            self.learning.rates.observe_busy(model, sequences, excess_ms)

    def _serves(self, endpoint: str, model: str) -> bool:
        """Whether a pool of the policy in force serves `model` on `endpoint`: another
        replica's samples (the stream, the statistics) of any other teach this one
        nothing it routes by, and each new name would keep a per-model array (a writer
        naming thousands, a table of arrays without bound)."""
        return model in self.policy.catalog.models_of(endpoint)
