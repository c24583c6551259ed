"""Model-server workers: which engine metrics to read, and scraping them.

`EngineScraper` polls each endpoint's Prometheus page and keeps an `EngineSnapshot`
(queue, running batch, KV-cache use, LoRA adapters) plus a readiness verdict per endpoint
for the routing layer. `engines` names the series per engine kind; `parse` is the targeted
exposition-format parser behind it.
"""

from kinference.workers.engines import EngineKind, EngineMetrics, Series, engine_metrics
from kinference.workers.fetch import LeanPages, PageTooLarge
from kinference.workers.scrape import EngineScraper, OnUpdate, Targets
from kinference.workers.snapshot import EngineSnapshot, read_snapshot

__all__ = [
    "EngineKind",
    "EngineMetrics",
    "EngineScraper",
    "EngineSnapshot",
    "LeanPages",
    "OnUpdate",
    "PageTooLarge",
    "Series",
    "Targets",
    "engine_metrics",
    "read_snapshot",
]
