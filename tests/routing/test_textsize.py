"""Characters per token learned per model from reported prompt tokens."""

from __future__ import annotations

import json
import random
import statistics

import pytest

from kinference.bodies import Body
from kinference.config import parse_policy
from kinference.requests import parse_request
from kinference.requests.prompt import CHARS_PER_TOKEN, Prompt
from kinference.routing import PrefixIndex, ProviderHealth, Router, TenantGate, WorkerTable
from kinference.routing.decision import RouteQuery
from kinference.routing.learning import Served
from kinference.routing.policy import cooldowns_of
from kinference.routing.textsize import (
    MAX_MODELS,
    MIN_SAMPLES,
    PRIOR_CHARS_PER_TOKEN,
    WINDOW,
    TextSize,
)


def test_the_prior_holds_until_enough_samples() -> None:
    text = TextSize()
    assert text.chars_per_token("m") == PRIOR_CHARS_PER_TOKEN == CHARS_PER_TOKEN
    for _ in range(MIN_SAMPLES - 1):
        assert text.observe("m", 1600.0, 1000.0)
        assert text.chars_per_token("m") == PRIOR_CHARS_PER_TOKEN
    assert text.observe("m", 1600.0, 1000.0)
    assert text.chars_per_token("m") == pytest.approx(1.6)
    assert text.chars_per_token("other") == PRIOR_CHARS_PER_TOKEN  # per model


def test_the_median_is_robust_to_outliers() -> None:
    text = TextSize()
    rng = random.Random(3)
    for _ in range(WINDOW):
        text.observe("m", 3000.0, 3000.0 / rng.uniform(1.5, 1.7))
    for _ in range(WINDOW // 4):  # a quarter of wrong usage blocks moves it little
        text.observe("m", 3000.0, 3000.0 / 15.0)
    assert 1.55 < text.chars_per_token("m") < 1.75


def test_the_ratio_is_the_median_of_the_window_report_by_report() -> None:
    """The window's median kept as samples come and go is `statistics.median` of it, to
    the bit, at every report (ties, repeats and both parities of the window included)."""
    rng = random.Random(11)
    for _ in range(20):
        text, accepted = TextSize(), []
        for _ in range(rng.randint(1, 3 * WINDOW)):
            chars = float(rng.choice((2000, 3000, rng.randint(256, 50_000))))
            tokens = float(rng.choice((1000, rng.randint(1, 40_000))))
            if text.observe("m", chars, tokens):
                accepted.append(chars / tokens)
            window = accepted[-WINDOW:]
            expected = statistics.median(window) if len(window) >= MIN_SAMPLES else None
            assert text.learned().get("m") == expected


def test_what_no_tokenizer_makes_and_too_short_prompts_teach_nothing() -> None:
    text = TextSize()
    assert not text.observe("m", 10_000.0, 1.0)  # 10 000 characters a token
    assert not text.observe("m", 1_000.0, 5_000.0)  # a fifth of a character a token
    assert not text.observe("m", 100.0, 60.0)  # too short: template and rounding
    assert not text.observe("m", 1_000.0, 0.0)
    assert text.learned() == {}


def test_the_window_follows_a_changed_tokenizer() -> None:
    text = TextSize()
    for _ in range(WINDOW):
        text.observe("m", 4000.0, 1000.0)
    for _ in range(WINDOW // 2 + 1):
        text.observe("m", 2000.0, 1000.0)
    assert text.chars_per_token("m") == pytest.approx(2.0)


def test_the_models_tracked_are_bounded() -> None:
    text = TextSize()
    for i in range(MAX_MODELS + 10):
        for _ in range(MIN_SAMPLES):
            text.observe(f"model-{i}", 2000.0, 1000.0)
    learned = text.learned()
    assert len(learned) == MAX_MODELS
    assert "model-0" not in learned and f"model-{MAX_MODELS + 9}" in learned


def test_a_prompt_keeps_its_text_apart_from_fixed_estimates() -> None:
    req = chat("x" * 4000)
    prompt = req.request.prompt
    assert prompt.text_chars == 4000 and prompt.fixed_tokens > 0
    assert prompt.tokens_at(CHARS_PER_TOKEN, req.request.token_estimate) == (
        req.request.token_estimate
    )
    assert prompt.tokens_at(2.0, 0) == pytest.approx(prompt.fixed_tokens + 2000)
    assert Prompt(("a",)).tokens_at(2.0, 7) == 7  # no breakdown: the estimate given


def chat(text: str, model: str = "m") -> RouteQuery:
    raw = json.dumps({"model": model, "messages": [{"role": "user", "content": text}]}).encode()
    return RouteQuery(parse_request(Body([raw], reserved=len(raw))))


def router() -> Router:
    policy = parse_policy(
        "pools:\n  - {name: p, endpoints: [10.0.0.1:8000, 10.0.0.2:8000], models: [m]}\n"
        "models:\n  - name: m\n    targets:\n"
        "      - {pool: default/p, model: m, when: {max_prompt_tokens: 1500}}\n"
    )
    return Router(
        policy, table=WorkerTable(), prefix=PrefixIndex(50_000),
        health=ProviderHealth(cooldowns_of(policy)), tenants=TenantGate(),
        rng=random.Random(1),
    )  # fmt: skip


def test_reports_teach_the_router_and_its_estimates_follow() -> None:
    """A tokenizer of 1.6 characters a token: after a few reports the router's estimate of
    a prompt is 2.5 times the prior's, and so is the prefill it predicts."""
    r = router()
    text = "word " * 400  # 2000 characters
    first = r.route(chat(text)).local
    assert first is not None and first.text_chars == 2000
    assert first.prompt_tokens == pytest.approx(first.fixed_tokens + 500, abs=1)
    for i in range(MIN_SAMPLES):
        choice = r.route(chat(text + str(i))).local
        assert choice is not None
        r.picked(choice)
        reported = round(choice.text_chars / 1.6) + choice.fixed_tokens
        r.final(choice, Served(reported, 0, (), None, None))
    learned = r.route(chat(text)).local
    assert learned is not None
    assert learned.prompt_tokens == pytest.approx(learned.fixed_tokens + 2000 / 1.6, abs=1)


def test_the_targets_prompt_size_conditions_use_the_learned_ratio() -> None:
    r = router()
    text = "word " * 400  # 500 tokens at 4 a token, 1250 at 1.6, 2000 at 1
    assert r.route(chat(text)).local is not None
    for _ in range(MIN_SAMPLES):
        r.remote_text("10.0.0.1:8000", "m", 2000.0, 2000.0)  # another replica learned 1.0
    assert r.route(chat(text)).local is None  # past max_prompt_tokens now
