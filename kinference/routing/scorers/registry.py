"""The scorers by name: `routing.weights.<name>` weighs the scorer of that name."""

from __future__ import annotations

from collections.abc import Callable

from kinference.config.routing import RoutingSettings
from kinference.routing.plugins.base import Scorer
from kinference.routing.rates import Rates
from kinference.routing.scorers.kv_cache import KvCacheScorer
from kinference.routing.scorers.latency import LatencyScorer
from kinference.routing.scorers.lora import LoraScorer
from kinference.routing.scorers.prefix import PrefixScorer
from kinference.routing.scorers.queue import QueueScorer
from kinference.routing.scorers.ttft import TtftScorer

Factory = Callable[[RoutingSettings, Rates], Scorer]

FACTORIES: dict[str, Factory] = {
    TtftScorer.name: lambda settings, rates: TtftScorer(settings.ttft, rates),
    PrefixScorer.name: lambda settings, rates: PrefixScorer(settings.balance),
    QueueScorer.name: lambda settings, rates: QueueScorer(),
    KvCacheScorer.name: lambda settings, rates: KvCacheScorer(),
    LatencyScorer.name: lambda settings, rates: LatencyScorer(),
    LoraScorer.name: lambda settings, rates: LoraScorer(),
}


def build_scorers(settings: RoutingSettings, rates: Rates) -> list[tuple[Scorer, float]]:
    """Every scorer with a non-zero weight, with its weight, in the order of `weights`."""
    return [
        (FACTORIES[name](settings, rates), float(weight))
        for name, weight in settings.weights.model_dump().items()
        if weight > 0
    ]
