"""The routing benchmark: its pieces, and a short real run (engines, kinference, baselines).

The smoke run starts real processes (simulated engines, a kinference replica, sglang-router
when installed) and checks the figures are sane, not that kinference wins: a few seconds
of load on a shared machine decide nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kinference.config import parse_policy
from loadtest.routing_bench import report
from loadtest.routing_bench.engines import counter_deltas, parse_counters
from loadtest.routing_bench.main import options_from, parse_args, run_all, section
from loadtest.routing_bench.peers import SGLANG, installed
from loadtest.routing_bench.replay import Sample, request_body, turn_messages
from loadtest.routing_bench.routers import policy_yaml
from loadtest.routing_bench.stats import RunStats, quantile, summarise
from loadtest.routing_bench.stream import StreamResult
from loadtest.routing_bench.workload import BenchSpec, conversations

SPEC = BenchSpec()


def test_same_seed_same_requests_and_poisson_arrivals() -> None:
    first = conversations(SPEC, 120, rate=10.0, seed=3)
    again = conversations(SPEC, 120, rate=10.0, seed=3)
    other = conversations(SPEC, 120, rate=10.0, seed=4)
    assert first == again
    assert first != other
    arrivals = [c.arrival_s for c in first]
    assert arrivals == sorted(arrivals) and arrivals[0] > 0
    requests = sum(len(c.turns) for c in first)
    assert 100 <= requests <= 140
    assert {c.kind for c in first} == {"shared", "chat", "doc"}
    # Arrivals at about `rate` requests per second over the run.
    assert 0.6 * requests / 10.0 < arrivals[-1] < 1.4 * requests / 10.0


def test_doc_questions_share_their_document_and_chats_grow() -> None:
    convs = conversations(SPEC, 200, rate=10.0, seed=1)
    docs = [c.turns[0].messages[0][1] for c in convs if c.kind == "doc"]
    assert len(set(docs)) <= SPEC.documents < len(docs)
    chat = next(c for c in convs if c.kind == "chat" and len(c.turns) >= 3)
    assert len(chat.think_s) == len(chat.turns) - 1
    second = chat.turns[1]
    messages = turn_messages(second, ["the reply the engine gave"])
    assert messages[2] == {"role": "assistant", "content": "the reply the engine gave"}
    assert messages[:2] == turn_messages(chat.turns[0], [])[:2]
    body = json.loads(request_body(second, ["the reply the engine gave"]))
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == second.completion_tokens


def test_policy_is_valid_and_tuning_merges() -> None:
    tuning = {"balance": {"abs_threshold": 2}, "prefix": {"max_blocks": 256}}
    text = policy_yaml(["http://127.0.0.1:8001", "http://127.0.0.1:8002"], 700, tuning)
    policy = parse_policy(text)
    routing = policy.routing
    assert routing.balance.abs_threshold == 2
    assert routing.prefix.max_blocks == 256
    assert routing.prefix.lru_blocks_per_worker == 50_000  # the default: it learns capacity
    assert [list(pool.endpoints) for pool in policy.pools] == [["127.0.0.1:8001", "127.0.0.1:8002"]]


def test_without_tuning_the_benchmark_runs_the_shipped_defaults() -> None:
    policy = parse_policy(policy_yaml(["http://127.0.0.1:8001"], 700, {}))
    assert policy.routing == parse_policy("").routing


def test_the_regimes_set_slots_and_speeds() -> None:
    from loadtest.routing_bench.main import options_from, parse_args

    mixed = options_from(parse_args(["--quick", "--regime", "mixed"])).engines
    assert (mixed.max_num_seqs, mixed.slow_fraction, mixed.slow_factor) == (4, 0.5, 2.0)
    assert "--slow-fraction" in mixed.argv()
    large = options_from(parse_args(["--quick", "--regime", "vllm-64"]))
    assert large.engines.max_num_seqs == 64 and large.tuning == {}


def test_counters_quantiles_and_itl_buckets() -> None:
    page = (
        "# HELP vllm:prefix_cache_hits_total x\n"
        'vllm:prefix_cache_hits_total{engine="0",model_name="a"} 30.0\n'
        'vllm:prefix_cache_hits_total{engine="0",model_name="b"} 10.0\n'
        'vllm:prefix_cache_queries_total{engine="0",model_name="a"} 100.0\n'
        'vllm:request_success_total{engine="0",finished_reason="length",model_name="a"} 4.0\n'
    )
    counters = parse_counters(page)
    assert counters["hits"] == 40.0 and counters["queries"] == 100.0
    assert counters["requests"] == 4.0 and counters["prompt"] == 0.0
    assert counter_deltas([counters], [{**counters, "hits": 45.0}])[0]["hits"] == 5.0
    assert quantile([5.0, 1.0, 3.0, 2.0, 4.0], 0.5) == 3.0
    assert quantile([5.0, 1.0, 3.0, 2.0, 4.0], 0.9) == 5.0
    assert quantile([], 0.9) == 0.0
    result = StreamResult(200, gaps_s=[0.004, 0.012, 2.0])
    buckets = result.itl_buckets()
    assert len(buckets) == 15 and sum(buckets) == 3
    assert buckets[0] == 1 and buckets[2] == 1 and buckets[-1] == 1


def test_summary_cross_checks_engines() -> None:
    samples = [
        Sample("chat", 0.0, 0.1, 0.5, 100, 50, 10, "a"),
        Sample("doc", 0.1, 0.3, 0.9, 300, 0, 20, "b"),
        Sample("doc", 0.2, 0.0, 0.0, 0, 0, 0, "", error="StreamError: boom"),
    ]
    deltas = [
        {"queries": 100.0, "hits": 50.0, "requests": 1.0},
        {"queries": 300.0, "hits": 0.0, "requests": 1.0},
    ]
    stats = summarise("r", 2.0, samples, deltas, seconds=2.0)
    assert (stats.requests, stats.errors) == (2, 1)
    assert stats.hit_rate == pytest.approx(0.125) == stats.engine_hit_rate
    assert stats.ttft_p50_ms == pytest.approx(100.0)
    assert stats.ttft_p90_ms == pytest.approx(300.0)
    assert stats.out_tok_per_s == pytest.approx(15.0)
    assert stats.imbalance == pytest.approx(1.0) and stats.cv == 0.0
    assert stats.first_error.startswith("StreamError")


def test_section_is_replaced_between_markers_and_the_rest_kept(tmp_path: Path) -> None:
    path = tmp_path / "benchmarks.md"
    path.write_text("# Benchmarks\n\n## Other section\n\nkeep me\n")
    report.replace_section(path, "## Routing\n\nfirst")
    report.replace_section(path, "## Routing\n\nsecond")
    text = path.read_text()
    assert "keep me" in text and "second" in text and "first" not in text
    assert text.count(report.BEGIN) == 1 and text.count(report.END) == 1
    path.write_text(text + "\n## After\n\nalso kept\n")
    report.replace_section(path, "## Routing\n\nthird")
    text = path.read_text()
    assert "also kept" in text and "keep me" in text and "third" in text


async def test_quick_run_gives_sane_figures(tmp_path: Path) -> None:
    routers = "kinference,round_robin" + (",sglang" if installed(SGLANG) else "")
    out = tmp_path / "benchmarks.md"
    out.write_text("# Benchmarks\n\nother figures\n")
    args = ["--quick", "--routers", routers, "--rates", "6", "--duration", "2", "--out", str(out)]
    options = options_from(parse_args(args))
    results = await run_all(options)
    assert [r.router for r in results][: len(routers.split(","))] == [
        r.label for r in options.routers
    ]
    for stats in results:
        _check_sane(stats)
    report.replace_section(out, section(options, results, 1.0))
    assert options.chart is not None
    report.chart(results, options.chart)
    text = out.read_text()
    assert "other figures" in text and "| kinference, 1 replica | 6 |" in text
    assert options.chart.read_bytes().startswith(b"\x89PNG")


def _check_sane(stats: RunStats) -> None:
    assert stats.errors == 0, stats.first_error
    assert stats.requests >= 6
    assert 0.0 <= stats.hit_rate < 1.0
    # The responses' usage and the engines' own counters tell the same story.
    assert stats.engine_hit_rate == pytest.approx(stats.hit_rate, abs=0.02)
    assert 0.0 < stats.ttft_p50_ms <= stats.ttft_p90_ms <= stats.ttft_p99_ms < 30_000
    assert stats.req_per_s > 0 and stats.out_tok_per_s > stats.req_per_s
    assert stats.imbalance >= 1.0
