"""The learned prefill rates' fit (`kinference.routing.rates`), where it extrapolates."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinference.config import parse_policy
from kinference.routing.policy import compile_policy
from kinference.routing.rates import Rates
from kinference.routing.scorers.ttft_config import TtftConfig
from kinference.routing.table import WorkerTable

MODEL = "m"


def test_noisy_short_prompts_do_not_fit_away_the_per_token_cost() -> None:
    """h100's t3-12 (vllm-64, 4 replicas, load 5.5): a worker predicted 133 ms for a 48-token
    and for a 12k-token prompt alike (the simulator takes ~0.6 s for 12k). Its samples were
    hits of ~100 uncached tokens and chat turns of ~1.6k, 10 ms + 0.05 ms a token; under
    load the short ones' TTFT grew by more than the 1.6k ones' prefill: the least-squares
    line through the two clusters flattens (here 0.004 ms a token after nine such samples,
    12k tokens predicted at 151 ms), in t3-12 to the clamp at 0, the base taking the mean.
    Refusing a slope of 0 alone would not do: it falls there gradually."""
    rates = Rates()
    for _ in range(3):  # learned right: 10 ms + 0.05 ms a token
        for tokens in (100.0, 100.0, 1600.0):
            rates.observe_prefill(0, MODEL, tokens, 10.0 + 0.05 * tokens)
    # (within 2 %: the prior's fixed cost, 15 ms, still counts a little after nine samples)
    assert rates.prefill_ms(0, MODEL, 12_000.0) == pytest.approx(610.0, rel=0.02)
    for _ in range(3):  # a loaded host: ~120 ms of event-loop lag on the short ones
        for tokens, ttft_ms in ((100.0, 135.0), (100.0, 125.0), (1600.0, 110.0)):
            rates.observe_prefill(0, MODEL, tokens, ttft_ms)
    assert rates.learned(MODEL, "prefill_ms_per_token", 0) > 0.0
    assert rates.prefill_ms(0, MODEL, 12_000.0) > 300.0  # 0.6 s on the engine


@settings(deadline=None, max_examples=60)
@given(
    base=st.floats(0.0, 100.0),
    per_token=st.floats(0.01, 1.0),
    short=st.floats(0.0, 100.0),
    long=st.floats(400.0, 4000.0),
    short_lag=st.floats(0.0, 1000.0),
    long_share=st.floats(0.0, 1.0),
    rounds=st.integers(1, 3),
)
def test_delays_on_the_short_prompts_leave_most_of_the_slope(
    *,
    base: float,
    per_token: float,
    short: float,
    long: float,
    short_lag: float,
    long_share: float,
    rounds: int,
) -> None:
    """Learned on a linear engine, then a few rounds where the short prompts are delayed
    more than the long ones (`long_share` of their lag): the long prompts' time past the
    base never counts below 0, so the slope keeps at least `(1 - alpha)` a long sample of
    what it was, whatever the delays; the least-squares line alone went to 0."""
    rates = Rates()
    for _ in range(60):
        for tokens in (short, short, long):
            rates.observe_prefill(0, MODEL, tokens, base + per_token * tokens)
    assert rates.learned(MODEL, "prefill_ms_per_token", 0) == pytest.approx(per_token, rel=1e-3)
    for _ in range(rounds):
        for tokens, lag in ((short, short_lag), (short, short_lag), (long, short_lag * long_share)):
            rates.observe_prefill(0, MODEL, tokens, base + per_token * tokens + lag)
    kept = (1.0 - rates.alpha) ** rounds * 0.99
    assert rates.learned(MODEL, "prefill_ms_per_token", 0) >= kept * per_token
    assert rates.prefill_ms(0, MODEL, 12_000.0) >= kept * per_token * 12_000.0


@settings(deadline=None, max_examples=60)
@given(
    base=st.floats(0.0, 100.0),
    per_token=st.floats(0.01, 1.0),
    lag=st.floats(0.0, 500.0),
    lengths=st.lists(st.floats(300.0, 16_000.0), min_size=1, max_size=6),
)
def test_a_delay_on_every_prompt_goes_to_the_base(
    base: float, per_token: float, lag: float, lengths: list[float]
) -> None:
    """A lasting delay that does not grow with the prompt (a loaded host's event-loop lag)
    is fixed cost: once the samples before it have decayed, the slope is the engine's and
    the base took the delay (prompts of several lengths, a spread to fit); prompts alike
    are predicted right at their length."""
    rates = Rates()
    for _ in range(10):
        for tokens in lengths:
            rates.observe_prefill(0, MODEL, tokens, base + per_token * tokens)
    for _ in range(max(400 // len(lengths), 100)):
        for tokens in lengths:
            rates.observe_prefill(0, MODEL, tokens, base + lag + per_token * tokens)
    if max(lengths) - min(lengths) < 1000.0:  # little spread: right at their mean length
        mean = sum(lengths) / len(lengths)
        expected = base + lag + per_token * mean
        assert rates.prefill_ms(0, MODEL, mean) == pytest.approx(expected, rel=0.02, abs=0.5)
        return
    assert rates.learned(MODEL, "prefill_ms_per_token", 0) == pytest.approx(per_token, rel=0.02)
    for tokens in lengths:
        expected = base + lag + per_token * tokens
        assert rates.prefill_ms(0, MODEL, tokens) == pytest.approx(expected, rel=0.02, abs=0.5)


def test_a_slow_first_request_does_not_price_its_worker_out() -> None:
    """h116 (mixed 6 req/s, both seeds): the benchmark's first warm-up request (9 tokens)
    took 45 ms, the three after it 20-24 ms on another engine; the first one's worker
    learned a fixed cost of 45 ms from that one sample, was priced ~25 ms dearer than its
    peers for every cold prompt and, a fast engine, served no request at all. An engine's
    first request is often slow (connections, lazy init, graph capture): one sample leaves
    the fixed cost nearer its peers' than its own."""
    rates = Rates()
    rates.observe_prefill(0, MODEL, 9.0, 45.0)
    for ttft_ms in (24.0, 20.0, 21.0):
        rates.observe_prefill(1, MODEL, 9.0, ttft_ms)
    first = rates.learned(MODEL, "prefill_base_ms", 0)
    peer = rates.learned(MODEL, "prefill_base_ms", 1)
    assert first - peer < (45.0 - peer) / 2.0  # on main 45 against 21.5


def test_two_early_samples_do_not_set_a_steep_fixed_cost() -> None:
    """h116 (Dynamo 3 req/s, seed 2): worker 0's first two samples were a cold 5326-token
    document at 116 ms and a 306-token hit beside one running sequence at 64 ms (the busy
    cost not learned yet); the line through them gave 0.0104 ms a token and a fixed cost of
    60.8 ms (the mocker's ~0.019 and ~20), pricing every hit on w0 ~40 ms dear until 7.5 s."""
    rates = Rates()
    rates.observe_prefill(0, MODEL, 5326.0, 116.0)
    rates.observe_prefill(0, MODEL, 306.0, 64.0)
    assert rates.learned(MODEL, "prefill_base_ms", 0) < 40.0  # on main 60.8
    assert rates.learned(MODEL, "prefill_ms_per_token", 0) > 0.015  # on main 0.0104
    assert rates.prefill_ms(0, MODEL, 5326.0) > 100.0  # the document still priced about right


@settings(deadline=None, max_examples=60)
@given(
    base=st.floats(0.0, 100.0),
    per_token=st.floats(0.0, 1.0),
    samples_share=st.sampled_from([(10, 0.2), (30, 0.025)]),
)
def test_a_consistent_worker_is_learned_despite_the_prior(
    base: float, per_token: float, samples_share: tuple[int, float]
) -> None:
    """The prior's samples fade as the worker's own come: on a linear engine, prompts of
    10 to 1800 tokens are predicted within a fifth of the way to the prior's fixed cost
    after 10 samples, within 2.5 % after 30."""
    samples, share = samples_share
    rates = Rates(TtftConfig(prior_prefill_base_ms=15.0))
    lengths = (10.0, 600.0, 1800.0)
    for index in range(samples):
        tokens = lengths[index % 3]
        rates.observe_prefill(0, MODEL, tokens, base + per_token * tokens)
    off = share * abs(15.0 - base) + 1e-6 * (1.0 + base + per_token * 1800.0)
    assert abs(rates.learned(MODEL, "prefill_base_ms", 0) - base) <= off
    for tokens in lengths:
        assert abs(rates.prefill_ms(0, MODEL, tokens) - base - per_token * tokens) <= off


def test_the_priors_and_learning_rate_are_the_ttft_configs_and_follow_a_reload() -> None:
    """One home per default: `Rates` reads its priors and learning rate from the policy's
    `routing: ttft:` (`TtftConfig`), at construction and again on a reload, keeping what
    it learned."""
    defaults = TtftConfig()
    rates = Rates()
    assert (rates.alpha, rates.prior_base_ms, rates.prior_busy_ms) == (
        defaults.learning_rate,
        defaults.prior_prefill_base_ms,
        defaults.prior_busy_ms_per_sequence,
    )
    assert rates.prior_ms_per_token == 1000.0 / defaults.prior_prefill_tokens_per_s
    assert rates.prior_service_ms == defaults.prior_service_ms
    rates.observe_service(0, MODEL, 100.0)
    learned = rates.learned(MODEL, "service_ms", 0)
    table = WorkerTable()
    policy = parse_policy(RELOADED)
    assert compile_policy(policy, table, rates).ttft.rates is rates
    assert (rates.alpha, rates.prior_base_ms, rates.prior_busy_ms) == (0.25, 7.0, 2.0)
    assert (rates.prior_ms_per_token, rates.prior_service_ms) == (0.5, 900.0)
    assert rates.learned(MODEL, "service_ms", 0) == learned
    fresh = compile_policy(policy, table).ttft.rates
    assert (fresh.alpha, fresh.prior_ms_per_token, fresh.prior_service_ms) == (0.25, 0.5, 900.0)


RELOADED = """
pools:
  - namespace: default
    name: chat
    endpoints: ["10.0.0.1:8000"]
    models: ["m"]
routing:
  ttft:
    learning_rate: 0.25
    prior_prefill_base_ms: 7
    prior_busy_ms_per_sequence: 2
    prior_prefill_tokens_per_s: 2000
    prior_service_ms: 900
"""
