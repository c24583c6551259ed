"""EngineScraper targets and scheduling: reconfiguration, isolation, lifecycle."""

from __future__ import annotations

import asyncio

import pytest

from kinference.workers import EngineKind
from tests.workers.conftest import EngineFactory, HarnessFactory, eventually
from tests.workers.fake_engine import FakeEngine, Mode
from tests.workers.pages import sglang_text, vllm_text


async def test_set_targets_adds_and_removes_endpoints(
    fake_engine: EngineFactory, harness: HarnessFactory
) -> None:
    a = await fake_engine(text=vllm_text(1, 1, 0.5))
    b = await fake_engine(text=sglang_text(2, 2, 0.25))
    h = harness()
    h.scraper.set_targets({a.endpoint: ("vllm", None)})
    await h.scraper.start()
    await eventually(lambda: h.scraper.snapshot(a.endpoint) is not None, "A scraped")
    assert b.requests == 0

    h.scraper.set_targets({a.endpoint: ("vllm", None), b.endpoint: (EngineKind.SGLANG, None)})
    await eventually(lambda: h.scraper.snapshot(b.endpoint) is not None, "B scraped")
    assert h.scraper.endpoints == {a.endpoint, b.endpoint}
    assert h.metric("kinference_engine_ready_workers") == 2

    h.scraper.set_targets({b.endpoint: ("sglang", None)})
    assert h.scraper.endpoints == {b.endpoint}
    assert h.scraper.snapshot(a.endpoint) is None
    assert not h.scraper.ready(a.endpoint)
    assert h.updates[-1] == (a.endpoint, None, False)  # subscribers hear of the removal
    assert h.metric("kinference_engine_ready_workers") == 1
    # A is no longer scraped: B gets several more scrapes while A's count stands still.
    # A request already on the wire when A was removed may still land, so count from the
    # point where B has been scraped a few more times.
    await _more_requests(b, 3)
    a_requests = a.requests
    await _more_requests(b, 5)
    assert a.requests == a_requests


async def _more_requests(engine: FakeEngine, count: int) -> None:
    target = engine.requests + count
    await eventually(lambda: engine.requests >= target, f"{count} more scrapes")


async def test_unchanged_targets_keep_their_state(
    fake_engine: EngineFactory, harness: HarnessFactory
) -> None:
    a = await fake_engine(text=vllm_text(1, 1, 0.5))
    h = harness(interval_s=3600.0)
    h.scraper.set_targets({a.endpoint: ("vllm", None)})
    await h.scraper.start()
    await eventually(lambda: h.scraper.snapshot(a.endpoint) is not None, "A scraped")

    h.scraper.set_targets({a.endpoint: ("vllm", "/metrics")})  # the default path, spelt out
    assert h.scraper.snapshot(a.endpoint) is not None
    assert a.requests == 1  # not restarted, so not scraped again


async def test_a_changed_target_starts_over(
    fake_engine: EngineFactory, harness: HarnessFactory
) -> None:
    engine = await fake_engine(text=vllm_text(1, 1, 0.5), path="/metrics")
    h = harness()
    h.scraper.set_targets({engine.endpoint: ("vllm", "/metrics")})
    await h.scraper.start()
    await eventually(lambda: h.scraper.snapshot(engine.endpoint) is not None, "scraped")

    engine.path = "/other"
    engine.text = vllm_text(5, 5, 0.5)
    h.scraper.set_targets({engine.endpoint: ("vllm", "/other")})
    assert h.scraper.snapshot(engine.endpoint) is None  # the old reading does not carry over

    def new_reading() -> bool:
        snap = h.scraper.snapshot(engine.endpoint)
        return snap is not None and snap.waiting == 5

    await eventually(new_reading, "a reading from the new path")  # fmt: skip
    assert engine.paths[-1] == "/other"


async def test_bad_targets_change_nothing(
    fake_engine: EngineFactory, harness: HarnessFactory
) -> None:
    a = await fake_engine(text=vllm_text(1, 1, 0.5))
    h = harness()
    h.scraper.set_targets({a.endpoint: ("vllm", None)})
    with pytest.raises(ValueError, match="unknown engine 'none'"):
        h.scraper.set_targets({"10.0.0.9:8000": ("none", None)})
    with pytest.raises(ValueError, match="must start with '/'"):
        h.scraper.set_targets({"10.0.0.9:8000": ("vllm", "metrics")})
    assert h.scraper.endpoints == {a.endpoint}


async def test_a_hanging_endpoint_does_not_delay_another(
    fake_engine: EngineFactory, harness: HarnessFactory
) -> None:
    stuck = await fake_engine(text=vllm_text(1, 1, 0.5), mode=Mode.HANG)
    healthy = await fake_engine(text=vllm_text(2, 2, 0.5))
    h = harness(timeout_s=SETTLE_LONG_S)
    h.scraper.set_targets({stuck.endpoint: ("vllm", None), healthy.endpoint: ("vllm", None)})
    await h.scraper.start()

    await eventually(lambda: healthy.requests >= 10, "ten scrapes of the healthy endpoint")
    assert stuck.requests == 1  # still inside its first scrape
    assert h.scrapes("timeout") == 0
    assert h.scraper.snapshot(healthy.endpoint) is not None


async def test_scrapes_of_one_endpoint_never_overlap(
    fake_engine: EngineFactory, harness: HarnessFactory
) -> None:
    slow = await fake_engine(text=vllm_text(1, 1, 0.5), mode=Mode.SLOW, delay_s=0.03)
    h = harness(interval_s=0.001)  # far shorter than a scrape takes
    h.scraper.set_targets({slow.endpoint: ("vllm", None)})
    await h.scraper.start()
    await eventually(lambda: h.scrapes("ok") >= 4, "four scrapes")
    assert slow.max_in_progress == 1


async def test_targets_set_before_start_wait_for_it(
    fake_engine: EngineFactory, harness: HarnessFactory
) -> None:
    a = await fake_engine(text=vllm_text(1, 1, 0.5))
    h = harness()
    h.scraper.set_targets({a.endpoint: ("vllm", None)})
    assert h.scraper.ready(a.endpoint)  # nothing says otherwise yet
    assert h.scraper.snapshot(a.endpoint) is None
    assert a.requests == 0
    await h.scraper.start()
    await h.scraper.start()  # idempotent: still one task per endpoint
    await eventually(lambda: h.scrapes("ok") >= 3, "three scrapes")
    assert a.max_in_progress == 1


async def test_run_scrapes_until_cancelled(
    fake_engine: EngineFactory, harness: HarnessFactory
) -> None:
    a = await fake_engine(text=vllm_text(1, 1, 0.5))
    h = harness()
    h.scraper.set_targets({a.endpoint: ("vllm", None)})
    runner = asyncio.create_task(h.scraper.run())
    await eventually(lambda: h.scraper.snapshot(a.endpoint) is not None, "scraped")

    runner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await runner
    stopped_at = a.requests
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("scrape ")]
    assert h.scraper.snapshot(a.endpoint) is not None  # the last reading stays readable
    # Restartable, e.g. by a new leader term.
    await h.scraper.start()
    await eventually(lambda: a.requests > stopped_at, "scraping again")


async def test_aclose_ends_run(fake_engine: EngineFactory, harness: HarnessFactory) -> None:
    a = await fake_engine(text=vllm_text(1, 1, 0.5), mode=Mode.HANG)
    h = harness(timeout_s=SETTLE_LONG_S)
    h.scraper.set_targets({a.endpoint: ("vllm", None)})
    runner = asyncio.create_task(h.scraper.run())
    await eventually(lambda: a.requests == 1, "a scrape in flight")
    await h.scraper.aclose()  # cancels the hanging scrape too
    await asyncio.wait_for(runner, SETTLE_LONG_S)


def test_rejects_nonsense_settings(harness: HarnessFactory) -> None:
    nonsense = ({"interval_s": 0}, {"timeout_s": -1}, {"stale_after_s": 0}, {"max_page_bytes": 0})
    for bad in nonsense:
        with pytest.raises(ValueError, match="must be > 0"):
            harness(**bad)
    with pytest.raises(ValueError, match="failures_before_unready"):
        harness(failures_before_unready=0)


SETTLE_LONG_S = 30.0  # a timeout no test reaches


async def test_a_target_may_be_a_url_apart_from_the_serving_endpoint(
    fake_engine: EngineFactory, harness: HarnessFactory
) -> None:
    """Engines serving metrics on another port (Triton's 8002, Dynamo's system port): the
    serving endpoint keys the reading, the URL is where it is read."""
    metrics = await fake_engine(text=vllm_text(3, 2, 0.5), path="/metrics")
    serving = "10.255.255.1:8000"  # never contacted
    h = harness()
    h.scraper.set_targets({serving: ("vllm", f"http://{metrics.endpoint}/metrics")})
    await h.scraper.start()
    await eventually(lambda: h.scraper.snapshot(serving) is not None, "scraped at the URL")
    snapshot = h.scraper.snapshot(serving)
    assert snapshot is not None and snapshot.waiting == 3
