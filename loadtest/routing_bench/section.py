"""The benchmark's Markdown section: how the run was made, its figures, the targets."""

from __future__ import annotations

import platform
import time
from typing import TYPE_CHECKING

import yaml

from loadtest.routing_bench import pooled, ranges, report
from loadtest.routing_bench.stats import RunStats

if TYPE_CHECKING:
    from loadtest.routing_bench.main import Options


def section(options: Options, results: list[RunStats], seconds: float) -> str:
    """The Markdown section: how the run was made, the table, the verdicts, the chart."""
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    skipped = f" Not run: {', '.join(options.skipped)}." if options.skipped else ""
    tuning = yaml.safe_dump({"routing": options.tuning}, default_flow_style=None, sort_keys=False)
    lines = [
        "## Routing quality: kinference vs baselines and peer routers",
        "",
        "```sh",
        ".venv/bin/pip install -e '.[bench]'   # the peer routers",
        f".venv/bin/{options.command}",
        "```",
        "",
        f"Run of {when} ({options.label}, {_seeds(options)}, {seconds / 60:.1f} min, "
        f"Python {platform.python_version()}, 2 cores shared with other work).{skipped}",
        "",
        f"{options.fleet.describe()}; fresh engines for every run; {options.duration_s:g} s "
        f"of Poisson arrivals per run, {_after(options)}. Workload: shared "
        "system prompts, multi-turn chats re-sending the engine's real replies, questions on "
        "long documents (`routing_bench/workload.py`). kinference is `kinference gateway` "
        "with its in-process picker (4 replicas: 4 gateways sharing one Redis, requests "
        "round-robin over them); every router gets plain OpenAI HTTP from the load "
        "generator, which times TTFT from the POST to the first content chunk. Hit rate: "
        "cached / prompt tokens from the responses' usage (engine hit rate: the engines' own "
        "counters, where they keep them). Imbalance: requests of the busiest engine over the "
        "mean, from the engines' counters. Output tok/s in window: completion tokens "
        "streamed inside the arrivals window, per second of it, the same seconds for every "
        "router (`routing_bench/throughput.py`; the throughput target is checked on it); to "
        "last reply: completion tokens over the run's wall time, which ends with the last "
        "reply (its tail decides it). "
        "Load: the 1-minute load average at the run's end.",
        "",
        *_figures(options, results),
        "",
    ]
    if options.tuning:
        title = "Policy tuning of this run (an extra, labelled run; merged over the defaults):"
        lines += ["", title, "", "```yaml", tuning.rstrip(), "```"]
    else:
        lines += ["", "Policy: the shipped defaults (no `routing:` section)."]
    if options.chart is not None and options.out is not None:
        lines += ["", f"![TTFT p90 and hit rate by rate]({options.chart.name})"]
    return "\n".join(lines)


def _after(options: Options) -> str:
    if options.drain:
        return "then every conversation to its end"
    return "no request sent after that (a chat's later turns with it; what is under way ends)"


def _seeds(options: Options) -> str:
    if len(options.seeds) == 1:
        return f"seed {options.seeds[0]}"
    return f"seeds {', '.join(str(seed) for seed in options.seeds)}"


def _figures(options: Options, results: list[RunStats]) -> list[str]:
    """One seed: its table and the targets; several: pooled, and the per-seed range."""
    if len(options.seeds) == 1:
        return [report.table(results), "", *report.verdicts(results)]
    return ranges.pooled_summary(results)


def charted(options: Options, results: list[RunStats]) -> list[RunStats]:
    """The rows the chart shows: one seed's, or the seeds' pooled."""
    return results if len(options.seeds) == 1 else pooled.pooled(results)
