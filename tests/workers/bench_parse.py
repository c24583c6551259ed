"""Benchmark: the targeted parser against prometheus_client's on a realistic vLLM page.

Run from the repository root: `python -m tests.workers.bench_parse [engines] [lora_history]`.
Times are the best of several runs (the least disturbed by other processes).
"""

from __future__ import annotations

import sys

from prometheus_client.parser import text_string_to_metric_families

from kinference.workers import engine_metrics, read_snapshot
from kinference.workers.parse import parse_samples
from tests.workers.pages import vllm_page
from tests.workers.test_parse import best_of


def main(engines: int = 4, lora_history: int = 40) -> None:
    text = vllm_page(engines=engines, lora_history=lora_history)
    spec = engine_metrics("vllm")
    full = best_of(5, lambda: list(text_string_to_metric_families(text)))
    names = best_of(50, lambda: parse_samples(text, spec.names))
    snapshot = best_of(50, lambda: read_snapshot(text, spec, 0.0))
    print(f"page: {len(text) / 1024:.0f} KiB, {text.count(chr(10))} lines, {engines} engines")
    print(f"prometheus_client full parse: {full * 1e3:8.2f} ms")
    print(
        f"parse_samples, all {len(spec.names)} names:  {names * 1e3:8.3f} ms  ({full / names:.0f}x)"
    )
    print(f"read_snapshot (a scrape's work): {snapshot * 1e3:8.3f} ms  ({full / snapshot:.0f}x)")


if __name__ == "__main__":
    main(*(int(arg) for arg in sys.argv[1:3]))
