"""The soak's samples and the verdict drawn from them (growth slope, lag, drain)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import astuple, dataclass, fields

from loadtest.faults.harness import Scrape
from loadtest.faults.load import Tally

LAG = "kinference_event_loop_lag_seconds"
MAX_RSS_SLOPE_MIB_PER_MIN = 1.0  # over the second half; more is a growth trend


@dataclass(frozen=True)
class Sample:
    t_s: float
    rss_mib: float
    buffered_bytes: int
    bodies_held: int
    lag_mean_ms: float  # over the interval since the previous sample
    lag_p99_ms: float  # upper bound: the bucket holding the 99th percentile
    completed: int
    failed: int
    outstanding: int  # requests under way at the sample

    @staticmethod
    def header() -> list[str]:
        return [f.name for f in fields(Sample)]

    def row(self) -> list[str]:
        return [f"{v:.3f}" if isinstance(v, float) else str(v) for v in astuple(self)]


@dataclass(frozen=True)
class LagReading:
    """The cumulative lag histogram at one moment: buckets (le -> count), sum, count."""

    buckets: tuple[tuple[float, float], ...]
    total_s: float
    count: float

    @staticmethod
    def of(scrape: Scrape) -> LagReading:
        buckets = sorted(
            (float(labels["le"]), value)
            for labels, value in scrape.samples.get(f"{LAG}_bucket", [])
        )
        return LagReading(tuple(buckets), scrape.value(f"{LAG}_sum"), scrape.value(f"{LAG}_count"))

    def mean_ms_since(self, before: LagReading) -> float:
        count = self.count - before.count
        return 1000 * (self.total_s - before.total_s) / count if count else 0.0

    def p99_ms_since(self, before: LagReading, q: float = 0.99) -> float:
        """The smallest bucket bound holding `q` of the probes since `before` (inf if beyond)."""
        count = self.count - before.count
        if not count:
            return 0.0
        earlier = dict(before.buckets)
        for bound, cumulative in self.buckets:
            if cumulative - earlier.get(bound, 0.0) >= q * count:
                return 1000 * bound
        return math.inf


def slope_per_minute(times_s: Sequence[float], values: Sequence[float]) -> float:
    """Least-squares slope of `values` against time, per minute (0 with under 2 points)."""
    n = len(times_s)
    if n < 2:
        return 0.0
    mean_t, mean_v = sum(times_s) / n, sum(values) / n
    var = sum((t - mean_t) ** 2 for t in times_s)
    if not var:
        return 0.0
    cov = sum((t - mean_t) * (v - mean_v) for t, v in zip(times_s, values, strict=True))
    return 60 * cov / var


@dataclass(frozen=True)
class Summary:
    seconds: float
    requests: int
    completed: int
    failed: int
    skipped: int
    pick_p50_ms: float
    pick_p99_ms: float
    rss_first_mib: float
    rss_last_mib: float  # the last sample, taken once the load stopped and bodies drained
    rss_max_mib: float
    rss_slope_mib_per_min: float  # second half
    buffered_max_mib: float
    drained_s: float  # seconds for buffered bytes to reach 0 after the last request
    lag_probes: int  # event-loop lag probes the server made during the run
    lag_mean_ms: float
    lag_p99_ms: float
    lag_worst_sample_p99_ms: float
    examples: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return (
            self.failed == 0
            and self.requests > 0
            and self.rss_slope_mib_per_min < MAX_RSS_SLOPE_MIB_PER_MIN
        )

    def text(self) -> str:
        rate = self.completed / self.seconds if self.seconds else 0.0
        lines = [
            f"duration {self.seconds:.0f} s, requests {self.requests}, completed "
            f"{self.completed} ({rate:.1f}/s), failed {self.failed}, skipped {self.skipped}",
            f"pick latency p50 {self.pick_p50_ms:.2f} ms, p99 {self.pick_p99_ms:.2f} ms",
            f"RSS first {self.rss_first_mib:.0f} MiB, after the load stopped "
            f"{self.rss_last_mib:.0f} MiB, max "
            f"{self.rss_max_mib:.0f} MiB, slope over the second half "
            f"{self.rss_slope_mib_per_min:+.2f} MiB/min (target < {MAX_RSS_SLOPE_MIB_PER_MIN})",
            f"buffered max {self.buffered_max_mib:.1f} MiB, back to 0 in {self.drained_s:.2f} s "
            "after the last request",
            f"event-loop lag ({self.lag_probes} probes) mean {self.lag_mean_ms:.2f} ms, "
            f"p99 <= {self.lag_p99_ms:g} ms, "
            f"worst sample p99 <= {self.lag_worst_sample_p99_ms:g} ms",
            *(f"failure: {text}" for text in self.examples),
            "PASS" if self.passed else "FAIL",
        ]
        return "\n".join(lines)


def summarize(
    samples: Sequence[Sample],
    tally: Tally,
    first_lag: LagReading,
    last_lag: LagReading,
    *,
    skipped: int,
    drained_s: float,
) -> Summary:
    second_half = [s for s in samples if s.t_s >= samples[-1].t_s / 2] if samples else []
    rss = [s.rss_mib for s in samples] or [0.0]
    return Summary(
        seconds=samples[-1].t_s if samples else 0.0,
        requests=tally.requests,
        completed=tally.completed,
        failed=tally.failed,
        skipped=skipped,
        pick_p50_ms=1000 * tally.pick_quantile(0.5),
        pick_p99_ms=1000 * tally.pick_quantile(0.99),
        rss_first_mib=rss[0],
        rss_last_mib=rss[-1],
        rss_max_mib=max(rss),
        rss_slope_mib_per_min=slope_per_minute(
            [s.t_s for s in second_half], [s.rss_mib for s in second_half]
        ),
        buffered_max_mib=max((s.buffered_bytes for s in samples), default=0) / (1 << 20),
        drained_s=drained_s,
        lag_probes=int(last_lag.count - first_lag.count),
        lag_mean_ms=last_lag.mean_ms_since(first_lag),
        lag_p99_ms=last_lag.p99_ms_since(first_lag),
        lag_worst_sample_p99_ms=max((s.lag_p99_ms for s in samples), default=0.0),
        examples=tuple(tally.examples),
    )
