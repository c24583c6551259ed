"""Whether pending prefill delays a new prompt, learned per model from the order of first
tokens (`routing.overlap`): overtakes teach that the engines overlap prefills, a request
that came after the prefill it was predicted to wait for teaches that they do not; the
TTFT model scales the pending-prefill wait by the learned share."""

from __future__ import annotations

import math

import pytest

from kinference.routing import PrefixIndex, WorkerTable
from kinference.routing.decision import LocalChoice
from kinference.routing.journal import NullJournal
from kinference.routing.learning import Learning
from kinference.routing.overlap import MAX_MODELS, OVERTAKE_MARGIN_MS, PrefillOverlap
from kinference.routing.scorers.ttft import TtftConfig, TtftScorer
from tests.routing.plugin_helpers import MODEL, context

DOC = tuple(range(1, 201))  # a document's prefix blocks
PROMPT = tuple(range(1001, 1031))  # a system prompt's, cached on the worker


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Samples(NullJournal):
    """A journal keeping the overlap samples this replica would publish."""

    def __init__(self) -> None:
        self.samples: list[tuple[str, str, float]] = []

    def overlap(self, endpoint: str, model: str, waited: float) -> None:
        self.samples.append((endpoint, model, waited))


def choice(slot: int, hashes: tuple[int, ...], tokens: float, **fields: object) -> LocalChoice:
    return LocalChoice(
        f"10.0.0.{slot}:8000", slot, "default/pool", MODEL, prompt_tokens=tokens,
        hashes=hashes, **fields,  # type: ignore[arg-type]
    )  # fmt: skip


def learning() -> tuple[Learning, Clock, Samples]:
    clock, journal = Clock(), Samples()
    learn = Learning(WorkerTable(clock=clock), PrefixIndex(10_000), journal)
    learn.table.slot("10.0.0.0:8000")
    return learn, clock, journal


def test_the_share_is_the_prior_until_samples_then_their_mean_shrunk_toward_it() -> None:
    overlap = PrefillOverlap()
    assert overlap.share(MODEL) == 1.0 and math.isnan(overlap.learned(MODEL))
    assert overlap.observe(MODEL, 0.0)
    assert overlap.share(MODEL) == pytest.approx(0.2)  # one overtake: a fifth
    for _ in range(3):
        overlap.observe(MODEL, 0.0)
    assert overlap.share(MODEL) == pytest.approx(0.25 / (0.25 + 1 + 0.9 + 0.81 + 0.729))
    for _ in range(40):
        overlap.observe(MODEL, 1.0)
    assert overlap.share(MODEL) > 0.95  # forgotten as the engines show otherwise
    assert not overlap.observe(MODEL, math.nan)
    overlap.observe(MODEL, 7.0)  # clamped to a sample of 1
    assert overlap.share(MODEL) <= 1.0
    assert overlap.share("other") == 1.0  # per model


def test_the_models_with_samples_are_bounded() -> None:
    overlap = PrefillOverlap()
    for i in range(MAX_MODELS + 5):
        overlap.observe(f"m{i}", 0.0)
    assert math.isnan(overlap.learned("m0"))  # the first learned went
    assert overlap.share(f"m{MAX_MODELS + 4}") == pytest.approx(0.2)


def test_a_request_overtaking_a_document_being_prefilled_is_a_sample_of_overlap() -> None:
    """The simulated engine prefills each request apart: a prompt picked to a worker just
    after a 12k-token document has its first token long before the document does."""
    learn, clock, journal = learning()
    document = choice(0, DOC, 12_000.0)
    learn.picked(document)
    clock.now += 0.1
    hit = choice(0, PROMPT, 1500.0, cached_tokens=1500.0, predicted_ttft_ms=20.0)
    learn.picked(hit)
    clock.now += 0.02
    learn.first_token(hit, 20.0)
    assert learn.rates.overlap.share(MODEL) == 1.0  # due at the document's first token
    clock.now += 0.5
    learn.first_token(document, 620.0)
    assert learn.rates.overlap.share(MODEL) == pytest.approx(0.2)
    assert journal.samples == [("10.0.0.0:8000", MODEL, 0.0)]
    assert learn.rates.overlap.pending_overtakes() == 0


def test_first_tokens_of_one_engine_step_are_no_overtake() -> None:
    learn, clock, journal = learning()
    first = choice(0, DOC, 3000.0)
    learn.picked(first)
    second = choice(0, PROMPT, 100.0)
    learn.picked(second)
    clock.now += 0.3
    learn.first_token(second, 300.0)
    clock.now += (OVERTAKE_MARGIN_MS - 5.0) / 1000.0
    learn.first_token(first, 315.0)
    assert journal.samples == [] and learn.rates.overlap.share(MODEL) == 1.0


def test_an_overtaken_request_that_fails_teaches_nothing() -> None:
    learn, clock, journal = learning()
    document, hit = choice(0, DOC, 12_000.0), choice(0, PROMPT, 100.0)
    learn.picked(document)
    learn.picked(hit)
    clock.now += 0.02
    learn.first_token(hit, 20.0)
    clock.now += 1.0
    learn.released_before_first_token(document)
    assert journal.samples == [] and learn.rates.overlap.pending_overtakes() == 0


def test_a_request_that_came_after_the_prefill_it_was_predicted_to_wait_for_is_a_sample_of_1() -> (
    None
):
    """vLLM's scheduler: the new prompt's first token comes after the document's."""
    learn, clock, journal = learning()
    learn.rates.overlap.observe(MODEL, 0.0)  # an earlier overtake: 0.2
    document = choice(0, DOC, 12_000.0)
    learn.picked(document)
    hit = choice(
        0, PROMPT, 1500.0, cached_tokens=1500.0, predicted_ttft_ms=300.0,
        predicted_wait_ms=280.0, pending_wait_ms=560.0,
    )  # fmt: skip
    learn.picked(hit)
    clock.now += 0.6
    learn.first_token(document, 600.0)
    clock.now += 0.01
    learn.first_token(hit, 610.0)
    assert journal.samples == [("10.0.0.0:8000", MODEL, 1.0)]
    assert learn.rates.overlap.share(MODEL) > 0.2


@pytest.mark.parametrize("behind_ms", [0.0, 20.0, 25.0])
def test_a_pending_wait_no_longer_than_the_rest_of_the_ttft_is_no_sample(behind_ms: float) -> None:
    """Too short to tell apart from the request's own prefill (or none at all)."""
    learn, clock, journal = learning()
    hit = choice(
        0, PROMPT, 500.0, predicted_ttft_ms=60.0, predicted_wait_ms=behind_ms,
        pending_wait_ms=behind_ms,
    )  # fmt: skip
    learn.picked(hit)
    clock.now += 0.06
    learn.first_token(hit, 60.0)
    assert journal.samples == []


def test_another_replicas_samples_fold_into_the_same_share() -> None:
    learn, clock, journal = learning()
    document, hit = choice(0, DOC, 12_000.0), choice(0, PROMPT, 100.0)
    learn.picked(document)
    learn.picked(hit)
    clock.now += 0.02
    learn.first_token(hit, 20.0)
    clock.now += 0.5
    learn.first_token(document, 520.0)
    other, _, _ = learning()
    for _endpoint, model, waited in journal.samples:
        other.rates.overlap.observe(model, waited)
    assert other.rates.overlap.share(MODEL) == learn.rates.overlap.share(MODEL)


def test_the_ttft_model_scales_the_pending_prefill_wait_by_the_share() -> None:
    table = WorkerTable(clock=Clock())
    ctx = context(2, prompt_tokens=1500, cached=[1500, 0], table=table)
    ctx.hashes = PROMPT
    learn = Learning(table, PrefixIndex(10_000), NullJournal())
    learn.picked(choice(int(ctx.slots[0]), DOC, 12_000.0))
    scorer = TtftScorer(TtftConfig(), learn.rates)
    for predict in (scorer._predict_small, scorer._predict_vector):
        _, wait, *_ = predict(ctx)
        assert wait.tolist()[0] == pytest.approx(1200.0)  # 12k tokens at the prior 10k/s
        assert ctx.pending_wait_ms is not None
        assert ctx.pending_wait_ms.tolist() == pytest.approx([1200.0, 0.0])
    assert scorer.score(ctx).argmax() == 1  # behind the document: cold is faster
    for _ in range(4):
        learn.rates.overlap.observe(MODEL, 0.0)
    for predict in (scorer._predict_small, scorer._predict_vector):
        _, wait, *_ = predict(ctx)
        assert wait.tolist()[0] == pytest.approx(300.0 / (0.25 + 1 + 0.9 + 0.81 + 0.729))
        assert ctx.pending_wait_ms is not None
        assert ctx.pending_wait_ms.tolist()[0] == pytest.approx(1200.0)  # unscaled
    learn.rates.overlap = PrefillOverlap()
    for _ in range(30):
        learn.rates.overlap.observe(MODEL, 0.0)
    assert scorer.score(ctx).argmax() == 0  # the engines overlap: the hit stays cached
