"""The benchmark's Markdown section (replaced between markers on rerun) and its chart."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadtest.routing_bench.stats import RunStats

BEGIN = "<!-- bench_routing:begin -->"
END = "<!-- bench_routing:end -->"
HEADER = (
    "router", "rate req/s", "done", "failed", "hit rate", "engine hit rate",
    "TTFT p50 ms", "TTFT p90 ms", "TTFT p99 ms", "req/s", "output tok/s in window",
    "output tok/s to last reply",
    "imbalance max/mean", "CV", "Push+Pick+Pull p90 ms", "load 1 min",
)  # fmt: skip
# The targets (issue 13), per rate, for kinference with its defaults and 1 replica.
P50_SLACK = 1.10  # its TTFT p50 within 10 % of the best other router's
THROUGHPUT_SLACK = 0.99  # output tok/s in the window no lower than any other's, within 1 %
SHARED_HIT_TARGET = 0.97  # 4 replicas with Redis: of 1 replica's hit rate
SINGLE, SHARED = "kinference", "kinference-4-redis"


def _cells(stats: RunStats) -> tuple[str, ...]:
    engine_hits = "-" if stats.engine_hit_rate is None else f"{stats.engine_hit_rate:.3f}"
    return (
        stats.router,
        f"{stats.rate:g}",
        str(stats.requests),
        str(stats.errors),
        f"{stats.hit_rate:.3f}",
        engine_hits,
        f"{stats.ttft_p50_ms:.0f}",
        f"{stats.ttft_p90_ms:.0f}",
        f"{stats.ttft_p99_ms:.0f}",
        f"{stats.req_per_s:.2f}",
        f"{stats.window_tok_per_s:.0f}" if stats.window_s else "-",
        f"{stats.out_tok_per_s:.0f}",
        f"{stats.imbalance:.2f}",
        f"{stats.cv:.2f}",
        f"{stats.route_p90_ms:.0f}" if stats.route_p90_ms else "-",
        f"{stats.load:.1f}",
    )


def table(results: Sequence[RunStats]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|---|" + "--:|" * (len(HEADER) - 1)]
    for stats in sorted(results, key=lambda s: (s.rate, _order(results, s))):
        lines.append("| " + " | ".join(_cells(stats)) + " |")
    return "\n".join(lines)


def _order(results: Sequence[RunStats], stats: RunStats) -> int:
    routers = list(dict.fromkeys(s.router for s in results))
    return routers.index(stats.router)


def others(at_rate: Sequence[RunStats]) -> list[RunStats]:
    """The routers kinference is compared with: every row not kinference's own."""
    return [s for s in at_rate if not s.key.startswith("kinference")]


def checks(at_rate: Sequence[RunStats]) -> list[tuple[str, bool, str]]:
    """(target, met, the figures) at one rate, for the targets whose rows ran."""
    single = next((s for s in at_rate if s.key == SINGLE), None)
    shared = next((s for s in at_rate if s.key == SHARED), None)
    rest = others(at_rate)
    found: list[tuple[str, bool, str]] = []
    if single is not None and rest:
        best = min(rest, key=lambda s: s.ttft_p90_ms)
        found.append((
            "lowest TTFT p90", single.ttft_p90_ms < best.ttft_p90_ms,
            f"{single.ttft_p90_ms:.0f} ms vs {best.router} {best.ttft_p90_ms:.0f} ms",
        ))  # fmt: skip
        best = min(rest, key=lambda s: s.ttft_p50_ms)
        found.append((
            "TTFT p50 within 10 % of the best", single.ttft_p50_ms <= P50_SLACK * best.ttft_p50_ms,
            f"{single.ttft_p50_ms:.0f} ms vs {best.router} {best.ttft_p50_ms:.0f} ms",
        ))  # fmt: skip
        found.append(("output throughput no lower", *_throughput(single, rest)))
    if single is not None and shared is not None and single.hit_rate:
        ratio = shared.hit_rate / single.hit_rate
        found.append((
            "4 replicas >= 0.97 of 1 replica's hit rate", ratio >= SHARED_HIT_TARGET,
            f"{ratio:.3f} ({shared.hit_rate:.3f} / {single.hit_rate:.3f})",
        ))  # fmt: skip
    return found


def _throughput(single: RunStats, rest: Sequence[RunStats]) -> tuple[bool, str]:
    """Output tok/s in the arrivals window (`throughput.py`), the old figure beside it; the
    old figure (tokens over the run's wall time) alone for runs written before the window."""
    best = max(rest, key=lambda s: s.out_tok_per_s)
    old_met = single.out_tok_per_s >= THROUGHPUT_SLACK * best.out_tok_per_s
    old = f"{single.out_tok_per_s:.0f} tok/s vs {best.router} {best.out_tok_per_s:.0f}"
    if not all(s.window_s for s in (single, *rest)):
        return old_met, f"{old} (to the last reply; no window figures)"
    top = max(rest, key=lambda s: s.window_tok_per_s)
    met = single.window_tok_per_s >= THROUGHPUT_SLACK * top.window_tok_per_s
    return met, (
        f"{single.window_tok_per_s:.0f} tok/s in the window vs {top.router} "
        f"{top.window_tok_per_s:.0f} (to the last reply: {old}, {_word(old_met)})"
    )


def _word(met: bool) -> str:
    return "PASS" if met else "FAIL"


def verdicts(results: Sequence[RunStats]) -> list[str]:
    """The targets, checked per rate (`checks`), one line each."""
    lines = []
    for rate in sorted({s.rate for s in results}):
        at_rate = [s for s in results if s.rate == rate]
        for target, met, figures in checks(at_rate):
            lines.append(f"- {_word(met)} at {rate:g} req/s, {target}: {figures}")
    return lines


def dump(results: Sequence[RunStats], meta: dict[str, Any], path: Path) -> None:
    """The run's figures as JSON, for `ranges` to combine runs."""
    path.write_text(json.dumps({"meta": meta, "results": [s.row() for s in results]}, indent=1))


def load(path: Path) -> tuple[dict[str, Any], list[RunStats]]:
    data = json.loads(path.read_text())
    rows = [{**row, "ttfts_ms": tuple(row.get("ttfts_ms", ()))} for row in data["results"]]
    return data["meta"], [RunStats(**row) for row in rows]


def replace_section(path: Path, section: str) -> None:
    """Write `section` between the markers in `path`; the rest of the file stays."""
    block = f"{BEGIN}\n{section.rstrip()}\n{END}\n"
    text = path.read_text() if path.exists() else ""
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        text = head + block + (("\n" + tail) if tail else "")
    else:
        text = (text.rstrip() + "\n\n" if text.strip() else "") + block
    path.write_text(text)


def chart(results: Sequence[RunStats], path: Path) -> None:
    """TTFT p90 and hit rate against the offered rate, one line per router."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    routers = list(dict.fromkeys(s.router for s in results))
    figure, (ttft, hits) = plt.subplots(1, 2, figsize=(12, 4.5))
    for router in routers:
        points = sorted((s for s in results if s.router == router), key=lambda s: s.rate)
        rates = [s.rate for s in points]
        style = "-o" if router.startswith("kinference") else "--s"
        ttft.plot(rates, [s.ttft_p90_ms for s in points], style, label=router)
        hits.plot(rates, [s.hit_rate for s in points], style, label=router)
    ttft.set(
        xlabel="offered load, requests/s", ylabel="TTFT p90, ms", title="TTFT p90 (lower is better)"
    )
    hits.set(
        xlabel="offered load, requests/s",
        ylabel="prefix-cache hit rate",
        title="Hit rate (higher is better)",
    )
    ttft.set_yscale("log")
    hits.set_ylim(0, 1)
    for axes in (ttft, hits):
        axes.grid(True, alpha=0.3)
    hits.legend(fontsize=8, loc="lower left")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
