"""`routing.settle`'s rules that the random oracle (`test_settle_oracle`) meets too rarely to
hold them: a probe, or a bound that would hide a KV-cache reading as the request's own
hit, settles what it must; and no candidate that could win is left unsettled."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from unittest.mock import patch

import numpy as np

from kinference.routing import settle as settling
from kinference.routing.filters.saturation import OWN_HIT_SHARE, SaturationFilter
from kinference.routing.plugins.base import PickContext
from kinference.routing.plugins.pipeline import Asked, Pipeline
from kinference.routing.scorers.lora import LoraScorer
from kinference.routing.scorers.ttft import Parts, TtftScorer
from tests.routing.test_settle_oracle import _Routed


def _drive(tmp_path: Path, check: object, seeds: range = range(6)) -> int:
    """The oracle's histories with `check(pipeline, ctx, guard)` after every settle; the
    Picks checked."""
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text("{}")
    real, checked = settling.settle, [0]

    def checking(
        pipeline: Pipeline, ctx: PickContext, guard: SaturationFilter | None
    ) -> Asked | None:
        asked = real(pipeline, ctx, guard)
        check(pipeline, ctx, guard)  # type: ignore[operator]
        checked[0] += 1
        return asked

    for seed in seeds:
        driver = _Routed(seed, tokenizer)
        driver.attach()
        with patch.object(settling, "settle", checking):  # (the lazy router's: `_Counted`)
            for _ in range(300):
                driver.step()
    return checked[0]


def test_a_probe_among_the_candidates_settles_every_one(tmp_path: Path) -> None:
    real = TtftScorer.parts

    def probing(self: TtftScorer, *args: object, **kwargs: object) -> Parts:
        parts = real(self, *args, **kwargs)  # type: ignore[arg-type]
        return dataclasses.replace(parts, probes=np.ones(len(parts.probes)))

    def none_left(pipeline: Pipeline, ctx: PickContext, guard: object) -> None:
        assert ctx.unsettled is None or not ctx.unsettled.positions

    with patch.object(TtftScorer, "parts", probing):
        assert _drive(tmp_path, none_left) > 100


def test_no_bound_left_could_hide_a_full_cache_as_the_requests_own_hit(tmp_path: Path) -> None:
    def hidden(pipeline: Pipeline, ctx: PickContext, guard: SaturationFilter | None) -> None:
        if guard is None or ctx.unsettled is None:
            return
        own = OWN_HIT_SHARE * max(ctx.prompt_tokens, 1.0)
        for position in ctx.unsettled.positions:
            slot = int(ctx.slots[position])
            full = ctx.signals.kv_usage.item(slot) >= guard.config.kv_cache
            assert not (full and ctx.cached_tokens.item(position) >= own)

    assert _drive(tmp_path, hidden) > 100


def test_every_candidate_left_unsettled_scores_below_the_floor(tmp_path: Path) -> None:
    def below(pipeline: Pipeline, ctx: PickContext, guard: object) -> None:
        if ctx.unsettled is None or not ctx.unsettled.positions:
            return
        scores = next(s for s, _ in pipeline.scorers if isinstance(s, TtftScorer)).score(ctx)
        best = float(scores.max())
        assert all(scores[i] < best - 1e-9 for i in ctx.unsettled.positions)

    assert _drive(tmp_path, below) > 100


def test_each_scorer_is_asked_once_a_pick(tmp_path: Path) -> None:
    """`settle` asks the other scorers whether the TTFT scorer answers alone; `choose`
    takes their None answers rather than asking again (it asked the LoRA scorer twice a
    Pick)."""
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text("{}")
    asked, chose = [0], [0]
    real_score, real_choose = LoraScorer.score, Pipeline.choose

    def score(self: LoraScorer, ctx: PickContext) -> object:
        asked[0] += 1
        return real_score(self, ctx)

    def choose(self: Pipeline, *args: object, **kwargs: object) -> int:
        chose[0] += 1
        return real_choose(self, *args, **kwargs)  # type: ignore[arg-type]

    driver = _Routed(0, tokenizer)
    driver.attach()
    with patch.object(LoraScorer, "score", score), patch.object(Pipeline, "choose", choose):
        for _ in range(300):
            driver.step()
    assert chose[0] > 100 and driver.skipped > 0  # settle left some unsettled: it ran
    assert asked[0] == chose[0]
