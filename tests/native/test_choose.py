"""A small pool's choice in one C call (`_ttft.choose`, `Pipeline`'s fused path) gives the
general path's choice, totals and context on random worker tables, and is the path taken."""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kinference.routing.decision import QoS
from kinference.routing.features import Signals
from kinference.routing.filters.saturation import SaturationConfig, SaturationFilter
from kinference.routing.plugins.base import PickContext
from kinference.routing.plugins.pick import MaxScorePicker
from kinference.routing.plugins.pipeline import SATURATED, Pipeline, PluginCosts
from kinference.routing.scorers.lora import LoraScorer
from kinference.routing.scorers.ttft import TtftScorer
from tests.native.ttft_cases import CAPACITY, bits, build, float_lists, picks
from tests.routing.test_router import BIG_ENDPOINT, CHAT_ENDPOINTS, IMPLICIT, chat, make

pytest.importorskip("kinference.native._ttft")

ENDPOINTS = [f"10.0.0.{slot}:8000" for slot in range(CAPACITY)]


def chosen(
    case: dict[str, Any], weight: float, seed: int, fused: bool,
    guard: tuple[list[float], int, float] | None = None,
) -> tuple[object, ...]:  # fmt: skip
    """What `Pipeline.choose` answers (or raises) and sets on the context; `guard`: the
    KV-cache use per slot, queue depth and KV-cache threshold of a saturation check."""
    ctx, rates, config = build(case)
    check = None
    if guard is not None:
        kv, depth, full = guard
        ctx.signals = Signals(ctx.signals.waiting, np.array(kv, dtype=np.float64))
        check = SaturationFilter(SaturationConfig(queue_depth=depth, kv_cache=full))
    ctx.table.endpoints = list(ENDPOINTS)
    scorer = TtftScorer(config, rates, native=fused)
    taken: list[object] = []
    if fused:  # every drawn Pick is of the types the C form takes: none falls back
        assert scorer._choose is not None
        scorer._choose = recording(scorer._choose, taken)
    pipeline = Pipeline([(scorer, weight), (LoraScorer(), 0.25)], MaxScorePicker(),
                        PluginCosts(), fused=fused)  # fmt: skip
    rng = random.Random(seed)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            index = pipeline.choose(ctx, rng, check)
    except Exception as error:  # the type is what both must share
        return (type(error),)
    assert NotImplemented not in taken
    if index == SATURATED:
        return (index, rng.random(), ctx.predicted_ttft_ms, ctx.sequences)
    assert ctx.predicted_ttft_ms is not None and ctx.predicted_wait_ms is not None
    assert ctx.sequences is not None and ctx.probes is not None
    made = (ctx.predicted_ttft_ms, ctx.predicted_wait_ms, ctx.sequences, ctx.probes)
    return (index, rng.random(), *(bits(values) for values in made))


def recording(choose: Callable[..., object], taken: list[object]) -> Callable[..., object]:
    def kept(*args: object) -> object:
        taken.append(choose(*args))
        return taken[-1]

    return kept


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=picks(), weight=st.sampled_from([1.0, 0.5, 3.0]), seed=st.integers(0, 3))
def test_the_fused_choice_is_the_pipelines(case: dict[str, Any], weight: float, seed: int) -> None:
    assert chosen(case, weight, seed, fused=True) == chosen(case, weight, seed, fused=False)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=picks(), seed=st.integers(0, 3))
def test_cold_prefixes_go_home_alike(case: dict[str, Any], seed: int) -> None:
    """No candidate holds the prompt: near ties go to the prefix's home, ranked in C."""
    case = {**case, "cached": [0.0] * len(case["cached"]), "hashes": tuple(range(5, 30))}
    assert chosen(case, 1.0, seed, fused=True) == chosen(case, 1.0, seed, fused=False)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=picks(),
    seed=st.integers(0, 3),
    kv=float_lists(CAPACITY, 4),
    depth=st.integers(1, 40),
    full=st.sampled_from([0.8, 0.5, 1.0]),
)
def test_the_saturation_check_is_the_filters(
    case: dict[str, Any], seed: int, kv: list[float], depth: int, full: float
) -> None:
    """With the saturation filter as the guard: SATURATED (nothing computed) or the same
    choice, in C as by `levels_with_hits_in` and the pipeline."""
    kv = [value / 64.0 for value in kv]  # mostly [0, 1], as KV-cache use is
    guard = (kv, depth, full)
    fused = chosen(case, 1.0, seed, fused=True, guard=guard)
    assert fused == chosen(case, 1.0, seed, fused=False, guard=guard)


def plain_pick(hashes: tuple[int, ...], cached: list[float]) -> PickContext:
    """Four idle workers of one learned speed; the prompt cached as `cached` says."""
    case = next_case(len(cached))
    case.update(cached=cached, hashes=hashes)
    ctx, _, _ = build(case)
    ctx.table.endpoints = list(ENDPOINTS)
    return ctx


def next_case(count: int) -> dict[str, Any]:
    columns = {name: [0.0] * CAPACITY for name in ("inflight", "running", "inflight_at_reading",
               "batch", "running_max", "batch_limit", "batch_floor", "batch_ceiling",
               "pending_prefill", "prefill_ended", "probing")}  # fmt: skip
    columns["prefill_since"] = [float("nan")] * CAPACITY
    columns["probe_late"] = [float("nan")] * CAPACITY
    columns["batch_limit"] = [8.0] * CAPACITY
    config = {"prior_prefill_tokens_per_s": 10_000.0}
    return {"columns": columns, "waiting": [0.0] * CAPACITY, "slots": list(range(count)),
            "rates": [None, None, None], "busy": None, "config": config, "prompt": 2000.0,
            "cached": [0.0] * count, "memory": None, "footprint": None, "shared": [],
            "hashes": ()}  # fmt: skip


@pytest.mark.parametrize(
    "cached, hashes",
    [([0.0, 1500.0, 0.0, 0.0], (1, 2, 3)), ([0.0, 0.0, 0.0, 0.0], tuple(range(1, 20)))],
    ids=["a hit", "a cold prefix's home"],
)
def test_the_c_choice_is_taken(
    monkeypatch: pytest.MonkeyPatch, cached: list[float], hashes: tuple[int, ...]
) -> None:
    """A hit, and a cold prefix among equal idle workers, are chosen in the one C call:
    neither the saturation filter's check, nor the scorer's own score, nor the picker
    runs."""
    ctx = plain_pick(hashes, cached)
    _, rates, config = build({**next_case(4), "cached": cached, "hashes": hashes})
    scorer = TtftScorer(config, rates)
    pipeline = Pipeline([(scorer, 1.0), (LoraScorer(), 0.25)], MaxScorePicker(), PluginCosts())

    def refused(*args: object, **kwargs: object) -> object:
        raise AssertionError("the general path ran")

    monkeypatch.setattr(TtftScorer, "score", refused)
    monkeypatch.setattr(MaxScorePicker, "pick", refused)
    monkeypatch.setattr(SaturationFilter, "levels_with_hits_in", refused)
    monkeypatch.setattr(SaturationFilter, "any_saturated_in", refused)
    guard = SaturationFilter(SaturationConfig())  # every queue and KV-cache use at 0: free
    index = pipeline.choose(ctx, random.Random(0), guard)
    assert ctx.predicted_ttft_ms is not None
    if any(cached):
        assert index == 1
    else:
        monkeypatch.undo()
        general = Pipeline([(TtftScorer(config, rates, native=False), 1.0)], MaxScorePicker(),
                           PluginCosts())  # fmt: skip
        assert general.choose(plain_pick(hashes, cached), random.Random(0)) == index


def test_slot_ids_follow_the_table() -> None:
    picker, endpoints = MaxScorePicker(), ["a:1", "b:2"]
    first = picker.slot_ids(endpoints)
    assert first.dtype == np.uint64 and first.tolist() == [picker._id(e) for e in endpoints]
    endpoints.append("c:3")
    assert picker.slot_ids(endpoints).tolist() == [picker._id(e) for e in endpoints]
    assert picker.slot_ids(["c:3"]).tolist() == [picker._id("c:3")]


PROMPTS = ("hello", "a shared system prompt " * 40, "a shared system prompt " * 40 + "more",
           " ".join(f"word{i}" for i in range(400)))  # fmt: skip


def routes(seed: int, fused: bool) -> list[tuple[object, ...]]:
    """A router's decisions over random engine readings, prompts and classes, with each
    choice kept in flight (and a first token now and then)."""
    env = make(IMPLICIT, seed)
    if not fused:
        env.router.policy.pipeline._fused = None
    draw, made = random.Random(seed), []
    endpoints = (*CHAT_ENDPOINTS, BIG_ENDPOINT)
    for _ in range(150):
        for endpoint in endpoints:
            if draw.random() < 0.5:
                waiting = draw.choice([0.0, 0.0, 1.0, 4.0, 5.0, 11.0, None])
                env.engine(endpoint, waiting, draw.choice([0.1, 0.6, 0.85, 0.95, None]))
        qos = draw.choice(list(QoS))
        decision = env.route(chat(content=draw.choice(PROMPTS)), qos=qos)
        local = decision.local
        made.append((decision.outcome, decision.code, decision.reason,
                     None if local is None else (local.endpoint, local.predicted_ttft_ms,
                                                 local.predicted_wait_ms, local.sequences,
                                                 local.probe, local.cached_tokens)))  # fmt: skip
        if local is not None:
            env.table.inflight[local.slot] += 1.0
        env.clock.advance(draw.random() * 0.3)
    return made


@pytest.mark.parametrize("seed", range(6))
def test_routes_are_the_general_paths(seed: int) -> None:
    """Through the router (the saturation check, QoS's busy paths, the choice), the fused
    route decides as the general one, value for value."""
    assert routes(seed, fused=True) == routes(seed, fused=False)
