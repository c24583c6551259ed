"""The benchmark's Markdown section (replaced between markers on rerun) and its chart."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from loadtest.routing_bench.stats import RunStats

BEGIN = "<!-- bench_routing:begin -->"
END = "<!-- bench_routing:end -->"
HEADER = (
    "router", "rate req/s", "done", "failed", "hit rate", "engine hit rate",
    "TTFT p50 ms", "TTFT p90 ms", "TTFT p99 ms", "req/s", "output tok/s",
    "imbalance max/mean", "CV", "Push+Pick+Pull p90 ms",
)  # fmt: skip


def table(results: Sequence[RunStats]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|---|" + "--:|" * (len(HEADER) - 1)]
    for stats in sorted(results, key=lambda s: (s.rate, _order(results, s))):
        cells = (
            stats.router,
            f"{stats.rate:g}",
            str(stats.requests),
            str(stats.errors),
            f"{stats.hit_rate:.3f}",
            f"{stats.engine_hit_rate:.3f}",
            f"{stats.ttft_p50_ms:.0f}",
            f"{stats.ttft_p90_ms:.0f}",
            f"{stats.ttft_p99_ms:.0f}",
            f"{stats.req_per_s:.2f}",
            f"{stats.out_tok_per_s:.0f}",
            f"{stats.imbalance:.2f}",
            f"{stats.cv:.2f}",
            f"{stats.route_p90_ms:.0f}" if stats.route_p90_ms else "-",
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _order(results: Sequence[RunStats], stats: RunStats) -> int:
    routers = list(dict.fromkeys(s.router for s in results))
    return routers.index(stats.router)


def verdicts(results: Sequence[RunStats]) -> list[str]:
    """The targets, checked per rate: kinference (1 replica) has the lowest TTFT p90 of all
    non-kinference routers; 4 replicas with Redis reach >= 0.95 of 1 replica's hit rate."""
    lines = []
    for rate in sorted({s.rate for s in results}):
        at_rate = [s for s in results if s.rate == rate]
        ours = [s for s in at_rate if s.router.startswith("kinference")]
        others = [s for s in at_rate if not s.router.startswith("kinference")]
        single = next((s for s in ours if "1 replica" in s.router), None)
        shared = next((s for s in ours if "Redis" in s.router and "no Redis" not in s.router), None)
        if single is not None and others:
            best = min(others, key=lambda s: s.ttft_p90_ms)
            word = "PASS" if single.ttft_p90_ms < best.ttft_p90_ms else "FAIL"
            lines.append(
                f"- {word} at {rate:g} req/s: kinference (1 replica) TTFT p90 "
                f"{single.ttft_p90_ms:.0f} ms vs best other {best.router} {best.ttft_p90_ms:.0f} ms"
            )
        if single is not None and shared is not None and single.hit_rate:
            ratio = shared.hit_rate / single.hit_rate
            word = "PASS" if ratio >= 0.95 else "FAIL"
            lines.append(
                f"- {word} at {rate:g} req/s: 4 replicas + Redis reach {ratio:.3f} of 1 replica's "
                "hit rate (target >= 0.95)"
            )
    return lines


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
