"""bench_gateway's arithmetic: added latency against the engine, targets as PASS/FAIL."""

from __future__ import annotations

from loadtest.bench_gateway import KINDS, Slice, table, tails, verdicts


def slice_of(latency_ms: float, per_s: float, cpu_ms: float) -> Slice:
    latencies = [latency_ms / 1000] * 100
    return Slice(latencies, seconds=100 / per_s, cpu_s=cpu_ms * 100 / 1000)


def test_targets_are_judged_against_the_engine_and_the_peers() -> None:
    results = {}
    for kind in KINDS:
        for concurrency in (1, 16):
            results["engine (direct)", kind, concurrency] = slice_of(1.0, 2000, 0.3)
            results["kinference", kind, concurrency] = slice_of(2.0, 600, 1.0)
            results["litellm", kind, concurrency] = slice_of(16.0, 40, 14)
            results["vllm-router", kind, concurrency] = slice_of(1.5, 3000, 0.4)
    lines = table(results)
    assert lines[2].startswith("| engine (direct) | whole | 1.00 | 1.00 |  |  |")
    assert "| kinference | whole | 2.00 | 2.00 | 1.00 | 1.00 | 1.00 | 1.00 | 600 |" in lines
    judged = verdicts(results, "kinference")
    assert len(judged) == 10
    assert all(line.startswith("PASS") for line in judged if "vllm-router" not in line)
    assert all(line.startswith("FAIL") for line in judged if "vllm-router" in line)  # 0.2x
    assert verdicts(results, "kinference remote") == []  # not measured: nothing judged


def test_the_tail_table_shows_the_distribution_at_1_in_flight() -> None:
    latencies = [0.001] * 990 + [0.010] * 9 + [0.050]  # 1 ms, nine at 10 ms, one at 50 ms
    results = {
        (name, kind, concurrency): Slice(list(latencies), seconds=1.0)
        for name in ("engine (direct)", "kinference")
        for kind in KINDS
        for concurrency in (1, 16)
    }
    lines = tails(results)
    assert len(lines) == 2 + 2 * len(KINDS)
    assert "| kinference | whole | 1.00 | 1.00 | 10.00 | 50.00 | 50.00 | 1000 |" in lines
