"""The learned prefill rates' fit (`kinference.routing.rates`), where it extrapolates."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinference.routing.rates import Rates

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
    assert rates.prefill_ms(0, MODEL, 12_000.0) == pytest.approx(610.0)
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
