"""The routing benchmark: its pieces, and a short real run (engines, kinference, baselines).

The smoke run starts real processes (simulated engines, a kinference replica, sglang-router
when installed) and checks the figures are sane, not that kinference wins: a few seconds
of load on a shared machine decide nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from pathlib import Path

import pytest

from kinference.config import parse_policy
from loadtest.routing_bench import ranges, report
from loadtest.routing_bench.drivers import DirectDriver, Outcome
from loadtest.routing_bench.engines import counter_deltas, parse_counters
from loadtest.routing_bench.fleets import MOCKER_COUNTERS, Engines, MockerFleet, Precise, SimFleet
from loadtest.routing_bench.main import options_from, parse_args, run_all
from loadtest.routing_bench.peers import SGLANG, installed
from loadtest.routing_bench.replay import Replay, Sample, request_body, turn_messages
from loadtest.routing_bench.replicas import policy_yaml
from loadtest.routing_bench.routers import ROUTERS
from loadtest.routing_bench.section import section
from loadtest.routing_bench.stats import RunStats, quantile, summarise
from loadtest.routing_bench.stream import StreamResult, _on_event
from loadtest.routing_bench.workload import BenchSpec, conversations

SPEC = BenchSpec()
DYNAMO = Path(os.environ.get("KINFERENCE_DYNAMO_VENV", "/tmp/dynamo-venv"))
DYNAMO_MODEL = Path(os.environ.get("KINFERENCE_DYNAMO_MODEL", "/tmp/dynamo-model"))


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


def _engines(urls: list[str], **extra: object) -> Engines:
    return Engines(urls, [f"{url}/metrics" for url in urls], MOCKER_COUNTERS, **extra)  # type: ignore[arg-type]


def test_policy_is_valid_and_tuning_merges() -> None:
    tuning = {"balance": {"abs_threshold": 2}, "prefix": {"max_blocks": 256}}
    text = policy_yaml(_engines(["http://127.0.0.1:8001", "http://127.0.0.1:8002"]), tuning)
    policy = parse_policy(text)
    routing = policy.routing
    assert routing.balance.abs_threshold == 2
    assert routing.prefix.max_blocks == 256
    assert routing.prefix.lru_blocks_per_worker == 50_000  # the default: it learns capacity
    assert [list(pool.endpoints) for pool in policy.pools] == [["127.0.0.1:8001", "127.0.0.1:8002"]]


def test_without_tuning_the_benchmark_runs_the_shipped_defaults() -> None:
    policy = parse_policy(policy_yaml(_engines(["http://127.0.0.1:8001"]), {}))
    assert policy.routing == parse_policy("").routing
    (pool,) = policy.pools
    assert pool.engine == "vllm" and pool.metrics_port is None
    assert pool.metrics_target("127.0.0.1:8001") == "/metrics"  # on the endpoint itself


def test_mocker_metrics_are_read_on_their_port_and_precise_from_their_events(
    tmp_path: Path,
) -> None:
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text("{}")
    template = tmp_path / "tokenizer_config.json"
    template.write_text("{}")
    source = Precise("tcp://{host}:{port+1}", tokenizer, template, 16)
    engines = _engines(
        ["http://127.0.13.1:4000", "http://127.0.13.2:4100"], metrics_port=27000, precise=source
    )
    (pool,) = parse_policy(policy_yaml(engines, {})).pools
    assert pool.metrics_target("127.0.13.2:4100") == "http://127.0.13.2:27000/metrics"
    assert pool.prefix.mode == "approximate"
    (precise,) = parse_policy(policy_yaml(engines, {}, precise=True)).pools
    assert precise.prefix.mode == "precise" and precise.prefix.block_size == 16
    assert precise.prefix.events == "tcp://{host}:{port+1}"
    assert precise.prefix.tokenizer == str(tokenizer)
    with pytest.raises(ValueError, match="no KV events"):
        policy_yaml(_engines(["http://127.0.0.1:1"]), {}, precise=True)


def test_the_regimes_set_slots_and_speeds() -> None:
    mixed = options_from(parse_args(["--quick", "--regime", "mixed"])).fleet
    assert isinstance(mixed, SimFleet)
    setup = mixed.setup
    assert (setup.max_num_seqs, setup.slow_fraction, setup.slow_factor) == (4, 0.5, 2.0)
    assert "--slow-fraction" in setup.argv() and "50% of them 2x slower" in mixed.describe()
    large = options_from(parse_args(["--quick", "--regime", "vllm-64"]))
    assert isinstance(large.fleet, SimFleet) and large.fleet.setup.max_num_seqs == 64
    assert large.tuning == {}
    assert "--prefill-side-by-side" not in setup.argv() and "in turn" in mixed.describe()
    old = options_from(parse_args(["--quick", "--prefill-side-by-side"])).fleet
    assert isinstance(old, SimFleet) and "--prefill-side-by-side" in old.setup.argv()


def test_the_stream_keeps_the_engines_response_id() -> None:
    result = StreamResult(200)
    first = {"id": "chatcmpl-sim1f-00000002", "choices": [{"delta": {"content": "a"}}]}
    _on_event(result, first, 0.01, 0.0)
    _on_event(result, {"id": "other", "choices": [{"delta": {"content": "b"}}]}, 0.02, 0.01)
    assert (result.response_id, result.text) == ("chatcmpl-sim1f-00000002", "ab")


def test_dynamo_regime_runs_mockers_its_kv_router_and_the_precise_row() -> None:
    options = options_from(parse_args(["--regime", "dynamo", "--gpu-blocks", "512"]))
    assert isinstance(options.fleet, MockerFleet)
    assert (options.fleet.count, options.fleet.setup.gpu_blocks) == (4, 512)
    assert options.fleet.setup.max_num_seqs == 8
    keys = [router.key for router in options.routers if router.kind != "peer"]
    assert keys == ["kinference", "kinference-4-redis", "round_robin", "least_inflight",
                    "dynamo", "kinference-precise"]  # fmt: skip
    assert ROUTERS["dynamo"].arrangement == "dynamo-kv"
    assert ROUTERS["kinference"].arrangement == "endpoints"
    assert options.rates == (3.0, 6.0, 9.0) and options.spec.document_chars == 8_000
    # On the simulated engines the Dynamo-only rows of the default list are left out
    # silently, and said to be skipped when asked for by name.
    sim = options_from(parse_args([]))
    assert "dynamo" not in [router.key for router in sim.routers]
    # (Peers missing from this venv are said to be skipped; the Dynamo-only rows are not.)
    assert not [why for why in sim.skipped if "--regime dynamo" in why], sim.skipped
    asked = options_from(parse_args(["--routers", "kinference,dynamo,kinference-precise"]))
    assert [router.key for router in asked.routers] == ["kinference"]
    assert len(asked.skipped) == 2 and all("--regime dynamo" in why for why in asked.skipped)


def test_least_in_flight_takes_the_least_busy_in_round_robin_order() -> None:
    driver = DirectDriver(["a", "b", "c"], "least_inflight", seed=1)
    assert [driver.choose() for _ in range(3)] == ["a", "b", "c"]  # all idle: in turn
    driver.inflight.update(a=2, b=1, c=1)
    assert driver.choose() == "b"  # the turn starts at "a": the first of the least busy
    assert driver.choose() == "b"  # from "b"
    assert driver.choose() == "c"  # from "c"
    with pytest.raises(ValueError, match="unknown policy"):
        DirectDriver(["a"], "fastest", seed=1)


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


def _stats(key: str, rate: float, *, p50: float, p90: float, tok: float, hit: float) -> RunStats:
    return RunStats(
        key, rate, 10, 0, hit, None, p50, p90, p90, 1.0, tok, 1.0, 0.0, 10.0, key=key, load=2.0
    )


def test_the_targets_are_checked_against_every_other_router() -> None:
    at_rate = [
        _stats("kinference", 6, p50=52, p90=100, tok=400, hit=0.80),
        _stats("kinference-4-redis", 6, p50=60, p90=300, tok=390, hit=0.78),
        _stats("kinference-precise", 6, p50=10, p90=10, tok=900, hit=0.99),  # ours: not a peer
        _stats("dynamo", 6, p50=48, p90=120, tok=402, hit=0.60),
        _stats("least_inflight", 6, p50=70, p90=101, tok=380, hit=0.30),
    ]
    found = {target: (met, figures) for target, met, figures in report.checks(at_rate)}
    assert found["lowest TTFT p90"] == (True, "100 ms vs least_inflight 101 ms")
    assert found["TTFT p50 within 10 % of the best"][0]  # 52 <= 1.1 x 48
    assert found["output throughput no lower"][0]  # 400 >= 0.99 x 402
    assert found["4 replicas >= 0.97 of 1 replica's hit rate"][0]  # 0.975
    slower = [_stats("kinference", 6, p50=60, p90=130, tok=300, hit=0.8), *at_rate[1:]]
    assert not any(met for _, met, _ in report.checks(slower)[:3])
    lines = report.verdicts(slower)
    assert lines[0] == "- FAIL at 6 req/s, lowest TTFT p90: 130 ms vs least_inflight 101 ms"
    assert len(lines) == 4 and lines[-1].startswith("- PASS at 6 req/s, 4 replicas")
    # No engine hit-rate counters (Dynamo's mocker): shown as "-", not as 0.
    assert "| dynamo | 6 | 10 | 0 | 0.600 | - | 48 |" in report.table(at_rate)


def test_ranges_span_the_runs_and_count_the_targets_met(tmp_path: Path) -> None:
    first = [
        _stats("kinference", 6, p50=52, p90=100, tok=400, hit=0.8),
        _stats("dynamo", 6, p50=48, p90=120, tok=402, hit=0.6),
    ]
    second = [
        _stats("kinference", 6, p50=50, p90=140, tok=401, hit=0.7),
        _stats("dynamo", 6, p50=48, p90=120, tok=402, hit=0.6),
    ]
    paths = []
    for number, run in enumerate((first, second)):
        path = tmp_path / f"run{number}.json"
        report.dump(run, {"regime": "dynamo"}, path)
        assert report.load(path) == ({"regime": "dynamo"}, run)
        paths.append(path)
    text = ranges.summary(paths)
    assert text.startswith("#### dynamo: range over 2 run(s)")
    assert "| kinference | 6 | 2 | 50\u201352 | 100\u2013140 | 0.700\u20130.800 |" in text
    assert "| dynamo | 6 | 2 | 48 | 120 | 0.600 | - | 402 |" in text  # no window figure
    assert "- 6 req/s, lowest TTFT p90: met in 1 of 2 run(s)" in text


class _Instant:
    """A driver whose every request completes at once."""

    def __init__(self) -> None:
        self.sent = 0

    async def send(self, body: bytes) -> Outcome:
        self.sent += 1
        result = StreamResult(200, 0.001, 0.002, 10, 2, 0, 1, pieces=["ok"])
        return Outcome(result, "e")

    async def close(self) -> None:
        pass


async def test_with_a_window_no_turn_is_sent_after_it() -> None:
    (chat,) = [c for c in conversations(SPEC, 40, 10.0, 1) if len(c.turns) >= 3][:1]
    early = dataclasses.replace(chat, arrival_s=0.0, think_s=(0.0, 30.0, *chat.think_s[2:]))
    late = dataclasses.replace(chat, index=99, arrival_s=30.0)  # its user comes after it
    driver = _Instant()
    replay = Replay(driver, window_s=0.5)
    async with asyncio.timeout(10):  # it sits out neither the 30 s pause nor the late user
        await replay.run([early, late])
    assert driver.sent == 2  # the first two turns; the third was due after the window
    everything = Replay(_Instant())
    quick = dataclasses.replace(early, think_s=tuple(0.0 for _ in early.think_s))
    await everything.run([quick])
    assert len(everything.samples) == len(quick.turns)


async def test_each_request_is_named_by_its_conversation_and_turn() -> None:
    """`--requests`: the same request is found under every router by (conversation, turn)."""
    chats = [c for c in conversations(SPEC, 40, 10.0, 1) if len(c.turns) >= 2][:2]
    quick = [
        dataclasses.replace(c, arrival_s=0.0, think_s=tuple(0.0 for _ in c.think_s)) for c in chats
    ]
    replay = Replay(_Instant())
    await replay.run(quick)
    named = {(s.conversation, s.turn) for s in replay.samples}
    assert named == {(c.index, n) for c in quick for n in range(len(c.turns))}
    line = json.loads(replay.samples[0].line("kinference", 6.0))
    assert line["router"] == "kinference" and line["rate"] == 6.0
    assert (line["conversation"], line["turn"]) == (
        replay.samples[0].conversation,
        replay.samples[0].turn,
    )


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
    routers = "kinference,kinference-grpc" + (",sglang" if installed(SGLANG) else "")
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
    by_key = {stats.key: stats for stats in results}
    assert by_key["kinference-grpc"].route_p90_ms > 0  # its Push + Pick + Pull, timed
    assert by_key["kinference"].route_p90_ms == 0  # the gateway: one POST, as for a peer
    report.replace_section(out, section(options, results, 1.0))
    assert options.chart is not None
    report.chart(results, options.chart)
    text = out.read_text()
    assert "other figures" in text and "| kinference, 1 replica | 6 |" in text
    assert options.chart.read_bytes().startswith(b"\x89PNG")


@pytest.mark.skipif(
    not (DYNAMO / "bin" / "python").exists() or not (DYNAMO_MODEL / "tokenizer.json").exists(),
    reason="Dynamo's mocker is not installed (../shared/tools/dynamo/README.md)",
)
@pytest.mark.timeout(240)
async def test_quick_run_on_dynamo_mockers_with_their_kv_router() -> None:
    args = ["--quick", "--regime", "dynamo", "--engines", "2", "--routers", "kinference,dynamo",
            "--rates", "3", "--duration", "2", "--dynamo", str(DYNAMO),
            "--dynamo-model", str(DYNAMO_MODEL)]  # fmt: skip
    results = await run_all(options_from(parse_args(args)))
    assert [r.key for r in results] == ["kinference", "dynamo"]
    for stats in results:
        _check_sane(stats)
        assert stats.engine_hit_rate is None  # the mocker keeps no prefix-cache counters


def _check_sane(stats: RunStats) -> None:
    assert stats.errors == 0, stats.first_error
    assert stats.requests >= 4
    assert 0.0 <= stats.hit_rate < 1.0
    # The responses' usage and the engines' own counters tell the same story.
    if stats.engine_hit_rate is not None:
        assert stats.engine_hit_rate == pytest.approx(stats.hit_rate, abs=0.02)
    assert 0.0 < stats.ttft_p50_ms <= stats.ttft_p90_ms <= stats.ttft_p99_ms < 30_000
    assert stats.req_per_s > 0 and stats.out_tok_per_s > stats.req_per_s
    assert stats.window_s == 2.0 and stats.window_tok_per_s > stats.req_per_s  # --duration
    assert stats.imbalance >= 1.0
