"""Precise prefix mode's parts, built only when the kv-events extra is installed (without
it, no pool can be in precise mode: policy validation refuses it). This module imports
nothing of the extra itself, so the composition root can always import it.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from kinference.config import Policy
from kinference.config.prefix import PRECISE_MODULES
from kinference.kvcache.precise import PreciseCaches
from kinference.routing import WorkerTable
from kinference.settings import Settings

if TYPE_CHECKING:  # imported when the extra is there
    from kinference.kvevents.setup import PreciseEvents
    from kinference.tokenize.prepare import PromptPreparer


def precise_parts(
    registry: CollectorRegistry,
    caches: PreciseCaches,
    table: WorkerTable,
    policy: Policy,
    settings: Settings,
) -> tuple[PreciseEvents | None, PromptPreparer | None]:
    """The event subscriptions and the prompt tokenizer of precise prefix mode, when the
    kv-events extra is installed (without it, no pool can be in precise mode: validation
    refuses it); `settings` bound what a replay may cost."""
    if any(importlib.util.find_spec(name) is None for name in PRECISE_MODULES):
        return None, None
    from kinference.kvevents.replay import ReplayLimits
    from kinference.kvevents.setup import PreciseEvents
    from kinference.kvevents.telemetry import PreciseMetrics
    from kinference.tokenize.prepare import PromptPreparer

    metrics = PreciseMetrics(registry, caches)
    preparer = PromptPreparer(policy, caches=caches, observe=metrics.tokenize_seconds.observe)
    return PreciseEvents(caches, table, metrics, ReplayLimits.of(settings)), preparer
