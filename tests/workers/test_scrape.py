"""EngineScraper against fake engines: readings per engine kind, staleness, readiness."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from prometheus_client import CollectorRegistry

from kinference.workers import EngineScraper, EngineSnapshot
from tests.clock import FakeClock
from tests.workers.conftest import EngineFactory, HarnessFactory, eventually
from tests.workers.fake_engine import Mode
from tests.workers.pages import sglang_text, triton_text, trtllm_text, vllm_page, vllm_text

PAGES: dict[str, tuple[str, str, Callable[[float, float, float], str]]] = {
    # case: (engine kind, path the fake serves, page builder)
    "vllm": ("vllm", "/metrics", vllm_text),
    "sglang": ("sglang", "/metrics", sglang_text),
    "trtllm-serve": ("trtllm", "/prometheus/metrics", trtllm_text),
    "triton-trtllm": ("trtllm", "/metrics", triton_text),
}


@pytest.mark.parametrize("case", PAGES)
async def test_reads_queue_batch_and_kv_per_engine_kind(
    case: str, fake_engine: EngineFactory, harness: HarnessFactory
) -> None:
    kind, path, page = PAGES[case]
    engine = await fake_engine(text=page(4, 9, 0.625), path=path)
    h = harness()
    # Triton's metrics are not at trtllm-serve's default path: the target names its own.
    explicit = path if case == "triton-trtllm" else None
    h.scraper.set_targets({engine.endpoint: (kind, explicit)})
    await h.scraper.start()

    await eventually(lambda: h.scraper.snapshot(engine.endpoint) is not None, "a snapshot")
    snap = h.scraper.snapshot(engine.endpoint)
    assert snap is not None
    assert (snap.waiting, snap.running, snap.kv_usage) == (4, 9, 0.625)
    assert snap.lora_adapters is None  # no LoRA gauge on the page: unknown, not "none"
    assert engine.paths[0] == path
    assert h.scraper.ready(engine.endpoint)


async def test_follows_page_changes(fake_engine: EngineFactory, harness: HarnessFactory) -> None:
    engine = await fake_engine(text=vllm_text(1, 1, 0.1))
    h = harness()
    h.scraper.set_targets({engine.endpoint: ("vllm", None)})
    await h.scraper.start()
    await eventually(lambda: h.scraper.snapshot(engine.endpoint) is not None, "a snapshot")

    engine.text = vllm_text(7, 2, 0.9)

    def changed() -> bool:
        snap = h.scraper.snapshot(engine.endpoint)
        return snap is not None and snap.waiting == 7

    await eventually(changed, "the new queue depth")  # fmt: skip


async def test_lora_adapters_from_the_newest_info_sample(
    fake_engine: EngineFactory, harness: HarnessFactory
) -> None:
    engine = await fake_engine(text=vllm_page(lora_history=25))
    h = harness()
    h.scraper.set_targets({engine.endpoint: ("vllm", None)})
    await h.scraper.start()
    await eventually(lambda: h.scraper.snapshot(engine.endpoint) is not None, "a snapshot")

    snap = h.scraper.snapshot(engine.endpoint)
    assert snap is not None
    assert snap.lora_adapters == frozenset({"sql-lora", "code-lora", "chat-lora"})
    assert snap.max_lora == 4
    # Four data-parallel engines: requests summed, KV use of the fullest.
    assert (snap.waiting, snap.running, snap.kv_usage) == (6, 30, 0.75)


async def test_snapshot_goes_stale(fake_engine: EngineFactory, harness: HarnessFactory) -> None:
    engine = await fake_engine(text=sglang_text(1, 2, 0.5))
    clock = FakeClock()
    # One scrape at start, then nothing for an hour: only the fake clock moves.
    h = harness(clock=clock, interval_s=3600.0, stale_after_s=0.5)
    h.scraper.set_targets({engine.endpoint: ("sglang", None)})
    await h.scraper.start()
    await eventually(lambda: h.scraper.snapshot(engine.endpoint) is not None, "a snapshot")

    clock.advance(0.5)  # binary-exact steps, so "exactly stale_after_s" is exact
    assert h.scraper.snapshot(engine.endpoint) is not None  # exactly stale_after_s: fresh
    clock.advance(0.25)
    assert h.scraper.snapshot(engine.endpoint) is None
    assert h.scraper.ready(engine.endpoint)  # stale is unknown, not failing
    assert engine.requests == 1


@pytest.mark.parametrize(
    ("mode", "result"), [(Mode.FAIL, "error"), (Mode.DROP, "error"), (Mode.HANG, "timeout")]
)
async def test_failures_make_unready_then_a_success_recovers(
    mode: Mode, result: str, fake_engine: EngineFactory, harness: HarnessFactory
) -> None:
    engine = await fake_engine(text=vllm_text(1, 1, 0.5))
    h = harness(timeout_s=0.05, failures_before_unready=3)
    h.scraper.set_targets({engine.endpoint: ("vllm", None)})
    await h.scraper.start()
    await eventually(lambda: h.scraper.snapshot(engine.endpoint) is not None, "a snapshot")
    assert h.metric("kinference_engine_ready_workers") == 1

    engine.mode = mode
    await eventually(lambda: not h.scraper.ready(engine.endpoint), "not ready")
    assert h.scraper.snapshot(engine.endpoint) is None
    assert h.scrapes(result) >= 3
    assert h.metric("kinference_engine_ready_workers") == 0
    # Readiness flips on the third failure in a row, not before.
    failed = [ready for _, snap, ready in h.updates if snap is None]
    assert failed[:3] == [True, True, False]

    engine.mode = Mode.OK
    await eventually(lambda: h.scraper.ready(engine.endpoint), "ready again")
    assert h.scraper.snapshot(engine.endpoint) is not None
    assert h.metric("kinference_engine_ready_workers") == 1


async def test_a_failed_scrape_makes_metrics_unknown_at_once(
    fake_engine: EngineFactory, harness: HarnessFactory
) -> None:
    engine = await fake_engine(text=vllm_text(1, 1, 0.5))
    h = harness(failures_before_unready=100)
    h.scraper.set_targets({engine.endpoint: ("vllm", None)})
    await h.scraper.start()
    await eventually(lambda: h.scraper.snapshot(engine.endpoint) is not None, "a snapshot")

    engine.mode = Mode.FAIL
    await eventually(lambda: h.scrapes("error") >= 1, "a failed scrape")
    assert h.scraper.snapshot(engine.endpoint) is None
    assert h.scraper.ready(engine.endpoint)


async def test_engine_gone_counts_as_error(
    fake_engine: EngineFactory, harness: HarnessFactory
) -> None:
    engine = await fake_engine(text=vllm_text(1, 1, 0.5))
    endpoint = engine.endpoint
    await engine.close()  # nothing listens there any more: connection refused
    h = harness(failures_before_unready=2)
    h.scraper.set_targets({endpoint: ("vllm", None)})
    await h.scraper.start()
    await eventually(lambda: not h.scraper.ready(endpoint), "not ready")
    assert h.scrapes("error") >= 2
    assert h.scrapes("ok") == 0


async def test_wrong_path_is_an_error(fake_engine: EngineFactory, harness: HarnessFactory) -> None:
    engine = await fake_engine(text=trtllm_text(1, 1, 0.5), path="/prometheus/metrics")
    h = harness()
    h.scraper.set_targets({engine.endpoint: ("trtllm", "/metrics")})  # 404
    await h.scraper.start()
    await eventually(lambda: h.scrapes("error") >= 1, "a failed scrape")
    assert h.scraper.snapshot(engine.endpoint) is None


async def test_oversized_page_is_an_error(
    fake_engine: EngineFactory, harness: HarnessFactory
) -> None:
    engine = await fake_engine(text=vllm_page())
    h = harness(max_page_bytes=10_000)
    h.scraper.set_targets({engine.endpoint: ("vllm", None)})
    await h.scraper.start()
    await eventually(lambda: h.scrapes("error") >= 1, "a failed scrape")
    assert h.scraper.snapshot(engine.endpoint) is None


async def test_collectors_count_results_and_durations(
    fake_engine: EngineFactory, harness: HarnessFactory
) -> None:
    engine = await fake_engine(text=vllm_text(1, 1, 0.5))
    h = harness()
    for result in ("ok", "error", "timeout"):  # exported at zero before any scrape
        assert h.registry.get_sample_value(
            "kinference_engine_scrapes_total", {"result": result}
        ) == 0.0  # fmt: skip
    h.scraper.set_targets({engine.endpoint: ("vllm", None)})
    await h.scraper.start()
    await eventually(lambda: h.scrapes("ok") >= 3, "three scrapes")
    assert h.metric("kinference_engine_scrape_seconds_count") >= 3
    families = {m.name: m for m in h.registry.collect()}
    labels = {k for s in families["kinference_engine_scrapes"].samples for k in s.labels}
    assert labels == {"result"}  # no per-endpoint label


async def test_a_failing_subscriber_does_not_stop_scraping(
    fake_engine: EngineFactory, harness: HarnessFactory, caplog: pytest.LogCaptureFixture
) -> None:
    engine = await fake_engine(text=vllm_text(1, 1, 0.5))
    calls: list[EngineSnapshot | None] = []

    def broken(endpoint: str, snapshot: EngineSnapshot | None) -> None:
        calls.append(snapshot)
        raise RuntimeError("subscriber bug")

    h = harness(on_update=broken)
    h.scraper.set_targets({engine.endpoint: ("vllm", None)})
    await h.scraper.start()
    await eventually(lambda: len(calls) >= 3, "three updates despite the errors")
    assert "subscriber failed" in caplog.text


async def test_an_unexpected_error_costs_one_scrape(caplog: pytest.LogCaptureFixture) -> None:
    calls = 0

    def transport(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("a bug below the scraper")
        return httpx.Response(200, text=sglang_text(1, 2, 0.5))

    registry = CollectorRegistry()
    async with httpx.AsyncClient(transport=httpx.MockTransport(transport)) as client:
        scraper = EngineScraper(
            client,
            interval_s=0.001,
            timeout_s=1.0,
            stale_after_s=60.0,
            failures_before_unready=1,
            registry=registry,
        )
        scraper.set_targets({"engine.test:8000": ("sglang", None)})
        await scraper.start()
        try:
            await eventually(lambda: scraper.snapshot("engine.test:8000") is not None, "a reading")
        finally:
            await scraper.aclose()
    assert registry.get_sample_value("kinference_engine_scrapes_total", {"result": "error"}) == 1
    assert "failed unexpectedly" in caplog.text
