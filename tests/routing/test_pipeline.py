"""The pipeline: weights applied by scorer name, scores clamped, ties broken at random,
each plugin's cost counted; every weight names a scorer and every scorer has a weight."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from kinference.config import Policy, parse_policy
from kinference.config.routing import Weights
from kinference.routing.plugins import pipeline as pipeline_module
from kinference.routing.plugins.base import PickContext
from kinference.routing.plugins.pick import MaxScorePicker
from kinference.routing.plugins.pipeline import Pipeline, PluginCosts, clamped
from kinference.routing.rates import Rates
from kinference.routing.scorers.registry import FACTORIES, build_scorers
from kinference.routing.table import FloatArray
from tests.routing.plugin_helpers import context


class Fixed:
    """A scorer answering fixed scores, named per instance (plugins name their class)."""

    name = "fixed"

    def __init__(self, name: str, values: list[float]) -> None:
        self.name = name
        self.values = np.asarray(values)

    def score(self, ctx: PickContext) -> FloatArray | None:
        return self.values


def test_every_weight_names_a_scorer_and_every_scorer_is_weighed() -> None:
    assert set(Weights.model_fields) == set(FACTORIES)
    built = build_scorers(Policy().routing, Rates())
    assert [scorer.name for scorer, _ in built] == ["ttft", "lora"]  # the shipped defaults


def test_weights_from_the_policy_file_reach_the_scorers_by_name() -> None:
    policy = parse_policy("routing:\n  weights: {ttft: 0, queue: 2, prefix: 3}\n")
    built = {scorer.name: weight for scorer, weight in build_scorers(policy.routing, Rates())}
    assert built == {"queue": 2.0, "prefix": 3.0, "lora": 0.25}


def test_scores_are_clamped_and_nan_is_neutral() -> None:
    values = clamped(np.array([-3.0, 0.2, 7.0, np.nan, np.inf, -np.inf]))
    assert values.tolist() == [0.0, 0.2, 1.0, 0.5, 1.0, 0.0]


def test_a_scorer_cannot_outvote_by_its_scale() -> None:
    loud = Fixed("loud", [1000.0, 0.0])  # clamped to 1, 0
    quiet = Fixed("quiet", [0.0, 1.0])
    pipeline = Pipeline([(loud, 1.0), (quiet, 2.0)], MaxScorePicker(), PluginCosts())
    assert pipeline.choose(context(2), random.Random(0)) == 1


def test_zero_weights_are_skipped_and_costs_are_counted_per_plugin() -> None:
    costs = PluginCosts()
    off = Fixed("off", [1.0, 0.0])
    on = Fixed("on", [0.0, 1.0])
    pipeline = Pipeline([(off, 0.0), (on, 1.0)], MaxScorePicker(), costs)
    for _ in range(3):
        assert pipeline.choose(context(2), random.Random(0)) == 1
    assert costs.calls == {"on": 3, "max_score": 3}
    assert all(ns >= 0 for ns in costs.nanoseconds.values())


def test_ties_are_broken_at_random_over_every_tied_candidate() -> None:
    picker, rng = MaxScorePicker(), random.Random(1)
    totals = np.array([1.0, 0.2, 1.0, 1.0])
    assert {picker.pick(totals, rng) for _ in range(200)} == {0, 2, 3}
    assert picker.pick(np.array([0.1, 0.9]), rng) == 1


def test_the_small_and_the_vector_totals_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """Up to `SMALL_TOTALS` candidates the totals are summed on Python floats: the same
    clamp, products and sums as the arrays, so the same choice (and the same tie-breaks)."""
    rng = random.Random(7)
    special = [math.nan, math.inf, -math.inf, -2.0, 0.0, 1.0, 3.0]

    def scores(count: int) -> list[float]:
        return [rng.choice(special) if rng.random() < 0.3 else rng.random() for _ in range(count)]

    for trial in range(300):
        count = rng.randint(1, 8)
        scorers = [(Fixed(f"s{i}", scores(count)), rng.choice([0.25, 1.0, 3.0])) for i in range(3)]
        choices = []
        for threshold in (16, 0):  # the small form, then the vector form
            monkeypatch.setattr(pipeline_module, "SMALL_TOTALS", threshold)
            pipeline = Pipeline(scorers, MaxScorePicker(), PluginCosts())
            choices.append(pipeline.choose(context(count), random.Random(trial)))
        assert choices[0] == choices[1]
    for scorer, _ in scorers:  # and the totals themselves, value for value
        small = pipeline_module._weighted_small(None, 0.25, scorer.values.tolist())
        assert small == (0.25 * clamped(scorer.values)).tolist()


class Counted(Fixed):
    """A fixed scorer counting how often it is asked; `values` None answers None."""

    def __init__(self, name: str, values: list[float] | None) -> None:
        super().__init__(name, values or [])
        self.answers = None if values is None else self.values
        self.asked = 0

    def score(self, ctx: PickContext) -> FloatArray | None:
        self.asked += 1
        return self.answers


class FakeFused(Counted):
    """A `FusedScorer` whose one call chooses by its own scores alone (None: not taken)."""

    def __init__(self, values: list[float], taken: bool) -> None:
        super().__init__("fused", values)
        self.taken = taken

    def choose_small(
        self, ctx: PickContext, weight: float, home: int | None, ids: object,
        guard: tuple[object, object, float, float, float] | None = None,
    ) -> tuple[int, FloatArray] | None:  # fmt: skip
        if not self.taken:
            return None
        totals = weight * clamped(self.values)
        return int(np.argmax(totals)), totals


@pytest.mark.parametrize("taken", [True, False])
@pytest.mark.parametrize("answers", [[None, None], [None, [0.0, 0.9]], [[0.0, 0.9], None]])
def test_the_fused_path_asks_each_other_scorer_once(
    taken: bool, answers: list[list[float] | None]
) -> None:
    """Where another scorer answers (or the C form is not taken), the general path runs
    with what the fused path already asked: each scorer asked once a Pick, the same choice
    as the general path alone, and every plugin's cost counted once."""
    chosen = []
    for fused in (True, False):
        main = FakeFused([0.8, 0.1], taken)
        others = [Counted(f"other{i}", values) for i, values in enumerate(answers)]
        costs = PluginCosts()
        pipeline = Pipeline(
            [(main, 1.0), *((other, 1.0) for other in others)], MaxScorePicker(), costs,
            fused=fused,
        )  # fmt: skip
        chosen.append(pipeline.choose(context(2), random.Random(0)))
        assert [other.asked for other in others] == [1, 1]
        general = not (fused and taken and answers == [None, None])
        assert main.asked == (1 if general else 0)
        assert costs.calls == {"fused": 1, "other0": 1, "other1": 1, "max_score": 1}
    assert chosen[0] == chosen[1]
