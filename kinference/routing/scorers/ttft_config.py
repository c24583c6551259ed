"""The TTFT model's settings (`routing: ttft:`): its priors, its terms' weights and the
learning rate. Declared apart from the scorer (`routing.scorers.ttft`) because the learned
rates (`routing.rates`), which the scorer reads, take their priors and learning rate from it
too: one home for each default, and no import cycle between the two."""

from __future__ import annotations

from pydantic import Field, NonNegativeFloat, PositiveFloat

from kinference.routing.plugins.config import PluginConfig


class TtftConfig(PluginConfig):
    """The TTFT model's priors (used until a worker's rates are learned) and its terms."""

    # Prompt tokens prefilled per second: ~10k, an 8B model on one data-centre GPU is 10-30k.
    prior_prefill_tokens_per_s: PositiveFloat = 10_000.0
    prior_prefill_base_ms: NonNegativeFloat = 15.0  # fixed cost of a prefill step, ms
    # Milliseconds a request holds a batch slot after its first token: ~250 tokens at 8 ms.
    prior_service_ms: PositiveFloat = 2_000.0
    # Sequences an engine runs at once until a reading shows it full (vLLM's max_num_seqs
    # is larger; 8 is cautious: it spreads load early rather than piling onto one worker).
    prior_batch: PositiveFloat = 8.0
    # Milliseconds each running sequence adds to a TTFT until learned (`routing.rates`
    # learns it from the reports within a few; 0: no effect assumed before it is seen).
    prior_busy_ms_per_sequence: NonNegativeFloat = 0.0
    # Added at a full batch, growing with the square of its occupancy (little at light
    # load): a worker close to its batch limit is not taken for a gain smaller than this,
    # which would slow every sequence it decodes.
    decode_pressure_ms: NonNegativeFloat = 30.0
    # Share of the request's own uncached prefill added to its cost beyond the TTFT: the
    # compute it takes from the requests after it. Where two workers promise about the same
    # TTFT (the cached one busy prefilling what the request shares), the cache wins.
    compute_weight: NonNegativeFloat = 0.5
    # Share of the request's own uncached prefill added at the fullest candidate cache
    # (in proportion below it): new blocks evict others' reusable ones (which then cost
    # their prefill again), so a long cold prompt goes to the emptiest cache rather than
    # to one that learned rates favour by some per cent (sglang-router sends unmatched
    # prompts to its smallest tree).
    cache_space_weight: NonNegativeFloat = 1.0
    # Share of the request's predicted wait for a batch slot added to its cost: queued
    # behind a full batch, it then holds a slot that the requests coming after it there
    # wait for in turn (as many, at a standing queue, as it waited behind). A worker
    # with a free slot delays none of them: past saturation the cost of a cache hit
    # behind a queue is about twice its wait, and a miss on a free slot often wins
    # (least-in-flight's throughput and p90 beat a cache-only view there).
    queue_weight: NonNegativeFloat = 1.0
    # Share of the wait the request's own uncached prefill imposes on the requests that
    # reach that worker while it runs (engines prefill in turn: each waits for what is left
    # of it, half of it on average), taken as arriving at the worker's rate by Little's
    # law (sequences / service_ms a millisecond): `blocking_weight * rate * prefill**2 / 2`.
    # A long cold document then goes to an idle engine rather than to one whose cached
    # prompts are being asked for (vllm-64: shared prompts sent cold, or waiting ~0.6 s,
    # behind a document prefilling on their holder); a short prompt's is a few ms.
    blocking_weight: NonNegativeFloat = 1.0
    # Share of the expected wait beyond the most seen running while a worker's batch is
    # not known (`doubt.unseen_wait`), in the cost as a slot wait (1 + queue_weight).
    unsure_batch_weight: NonNegativeFloat = 1.0
    # Weight of a new sample in the learned rates (exponential forgetting).
    learning_rate: float = Field(default=0.1, gt=0.0, le=1.0)
