"""Scrapes every engine endpoint's metrics page on an interval and keeps the latest reading.

One asyncio task per endpoint: it scrapes, waits out the rest of its (jittered) interval,
and scrapes again, so an endpoint's scrapes never overlap and a slow or hanging endpoint
delays nobody else. Each scrape has a hard deadline (`timeout_s`) covering connection-pool
wait, connect, headers and the whole body.

What readers see:
- `snapshot(endpoint)`: the last reading, or None when there is none, it is older than
  `stale_after_s`, or the last scrape failed. None means unknown, never zero load.
- `ready(endpoint)`: False once `failures_before_unready` scrapes in a row have failed, True
  again at the next success. An endpoint not yet scraped is ready (nothing says otherwise).
- `on_update(endpoint, snapshot | None)`: called after every scrape, once the state above
  is updated, and with None when an endpoint is removed. A subscriber that keeps snapshots
  should still treat one older than `stale_after_s` (by `scraped_at`, on the same clock) as
  unknown: between scrapes, nothing is pushed when a reading ages out.

Settings that make sense together: timeout_s <= interval_s < stale_after_s, e.g. 50 ms,
100 ms and 250 ms, so one lost scrape does not yet make a worker's metrics unknown.

The HTTP client is the caller's (and closed by the caller). With many endpoints, give it a
connection limit at least the endpoint count, or scrapes queue for connections and time out.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import httpx
from prometheus_client import CollectorRegistry

from kinference.workers.engines import EngineKind, EngineMetrics, engine_metrics
from kinference.workers.fetch import FetchError, HttpxPages, PageFetcher
from kinference.workers.snapshot import EngineSnapshot, read_snapshot
from kinference.workers.telemetry import ScrapeMetrics, ScrapeResult

log = logging.getLogger(__name__)

# endpoint ("host:port") -> (engine kind, metrics path on the endpoint or a full metrics URL,
# or None for the engine's default path)
Targets = Mapping[str, tuple[EngineKind | str, str | None]]
OnUpdate = Callable[[str, EngineSnapshot | None], None]

# Prometheus text 0.0.4, which every engine serves; asked for explicitly so a server that
# negotiates never answers in protobuf.
_ACCEPT = "text/plain;version=0.0.4;q=0.9,*/*;q=0.1"
JITTER = 0.1  # each interval is interval_s * (1 ± JITTER), uniformly, by default


@dataclass(frozen=True, slots=True)
class _Target:
    engine: EngineMetrics
    url: str


@dataclass(slots=True)
class _Endpoint:
    target: _Target
    snapshot: EngineSnapshot | None = None
    failures: int = 0  # consecutive failed scrapes
    task: asyncio.Task[None] | None = None


class EngineScraper:
    """Keeps the latest engine metrics of every target endpoint; see the module docstring."""

    def __init__(
        self,
        client: PageFetcher | httpx.AsyncClient,
        *,
        interval_s: float,
        timeout_s: float,
        stale_after_s: float,
        failures_before_unready: int,
        registry: CollectorRegistry,
        clock: Callable[[], float] = time.monotonic,
        on_update: OnUpdate | None = None,
        jitter: float = JITTER,
        rng: random.Random | None = None,
        max_page_bytes: int = 16 * 1024 * 1024,
    ) -> None:
        _check_positive(
            interval_s=interval_s,
            timeout_s=timeout_s,
            stale_after_s=stale_after_s,
            max_page_bytes=max_page_bytes,
        )
        if failures_before_unready < 1 or not 0 <= jitter < 1:
            raise ValueError("failures_before_unready must be >= 1 and jitter in [0, 1)")
        # An httpx client is what tests hand in (with a mock transport); the app passes a
        # LeanPages, which it closes itself.
        self._pages = HttpxPages(client) if isinstance(client, httpx.AsyncClient) else client
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._stale_after_s = stale_after_s
        self._failures_before_unready = failures_before_unready
        self._clock = clock
        self._on_update = on_update
        self._jitter = jitter
        self._rng = rng or random.Random()
        self._max_page_bytes = max_page_bytes
        self._metrics = ScrapeMetrics(registry)
        self._metrics.watch_ready(lambda: sum(map(self._is_ready, self._endpoints.values())))
        self._endpoints: dict[str, _Endpoint] = {}
        self._retired: set[asyncio.Task[None]] = set()  # cancelled, not yet finished
        self._running = False
        self._stopped = asyncio.Event()

    # -- reading -------------------------------------------------------------------------

    @property
    def endpoints(self) -> frozenset[str]:
        return frozenset(self._endpoints)

    def snapshot(self, endpoint: str) -> EngineSnapshot | None:
        """The endpoint's last reading, or None when unknown, stale or failed."""
        state = self._endpoints.get(endpoint)
        current = None if state is None else state.snapshot
        if current is None or self._clock() - current.scraped_at > self._stale_after_s:
            return None
        return current

    def ready(self, endpoint: str) -> bool:
        """False for an unknown endpoint or one whose recent scrapes all failed."""
        state = self._endpoints.get(endpoint)
        return state is not None and self._is_ready(state)

    def _is_ready(self, state: _Endpoint) -> bool:
        return state.failures < self._failures_before_unready

    # -- targets and lifecycle -----------------------------------------------------------

    def set_targets(self, targets: Targets) -> None:
        """Scrape exactly these endpoints from now on.

        Unchanged endpoints keep their task and state; new ones start (if running);
        removed ones stop; one whose engine or path changed starts over. Every target is
        validated before anything changes, so a bad entry (ValueError) changes nothing.
        """
        wanted = {ep: _target(ep, engine, path) for ep, (engine, path) in targets.items()}
        for endpoint in self._endpoints.keys() - wanted.keys():
            self._remove(endpoint)
        for endpoint, target in wanted.items():
            current = self._endpoints.get(endpoint)
            if current is not None and current.target == target:
                continue
            if current is not None:
                self._remove(endpoint)
            self._endpoints[endpoint] = state = _Endpoint(target)
            if self._running:
                self._spawn(endpoint, state)

    async def start(self) -> None:
        """Start scraping every target (idempotent); returns at once."""
        self._running = True
        self._stopped.clear()
        for endpoint, state in self._endpoints.items():
            if state.task is None:
                self._spawn(endpoint, state)

    async def run(self) -> None:
        """Scrape until cancelled or until `aclose()`; stops every task on the way out."""
        await self.start()
        try:
            await self._stopped.wait()
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Stop every scrape task and wait for them; the state stays readable."""
        self._running = False
        self._stopped.set()
        for state in self._endpoints.values():
            if state.task is not None:
                self._retire(state.task)
                state.task = None
        retired = list(self._retired)
        await asyncio.gather(*retired, return_exceptions=True)

    def _spawn(self, endpoint: str, state: _Endpoint) -> None:
        state.task = asyncio.create_task(self._poll(endpoint, state), name=f"scrape {endpoint}")

    def _remove(self, endpoint: str) -> None:
        state = self._endpoints.pop(endpoint)
        if state.task is not None:
            self._retire(state.task)
        self._notify(endpoint, None)

    def _retire(self, task: asyncio.Task[None]) -> None:
        task.cancel()
        self._retired.add(task)
        task.add_done_callback(self._retired.discard)

    # -- scraping ------------------------------------------------------------------------

    async def _poll(self, endpoint: str, state: _Endpoint) -> None:
        while True:
            started = self._clock()
            result, snapshot = await self._attempt(state.target)
            self._metrics.observe(result, self._clock() - started)
            self._record(endpoint, state, snapshot)
            elapsed = self._clock() - started
            await asyncio.sleep(max(self._next_interval() - elapsed, 0.0))

    def _next_interval(self) -> float:
        return self._interval_s * (1.0 + self._jitter * self._rng.uniform(-1.0, 1.0))

    async def _attempt(self, target: _Target) -> tuple[ScrapeResult, EngineSnapshot | None]:
        try:
            async with asyncio.timeout(self._timeout_s):
                text = await self._fetch(target.url)
            return ScrapeResult.OK, read_snapshot(text, target.engine, self._clock())
        except TimeoutError:
            log.debug("scrape of %s timed out after %.3fs", target.url, self._timeout_s)
            return ScrapeResult.TIMEOUT, None
        except (FetchError, OSError) as exc:
            log.debug("scrape of %s failed: %s", target.url, exc)
            return ScrapeResult.ERROR, None
        except Exception:  # a bug here must cost one scrape, not the endpoint's loop
            log.exception("scrape of %s failed unexpectedly", target.url)
            return ScrapeResult.ERROR, None

    async def _fetch(self, url: str) -> str:
        """The page body as text; HTTP errors and oversized pages raise."""
        page = await self._pages.get(url, _ACCEPT, self._max_page_bytes)
        return page.decode("utf-8", errors="replace")  # the format is UTF-8

    def _record(self, endpoint: str, state: _Endpoint, snapshot: EngineSnapshot | None) -> None:
        if self._endpoints.get(endpoint) is not state:
            return  # replaced or removed while this scrape was in flight
        was_ready = self._is_ready(state)
        state.snapshot = snapshot
        state.failures = 0 if snapshot is not None else state.failures + 1
        if was_ready != self._is_ready(state):
            _log_readiness(endpoint, state.failures)
        self._notify(endpoint, snapshot)

    def _notify(self, endpoint: str, snapshot: EngineSnapshot | None) -> None:
        if self._on_update is None:
            return
        try:
            self._on_update(endpoint, snapshot)
        except Exception:  # a subscriber's bug must not stop the scrape loop
            log.exception("engine metrics subscriber failed for %s", endpoint)


def _target(endpoint: str, engine: EngineKind | str, path: str | None) -> _Target:
    spec = engine_metrics(engine)
    path = spec.metrics_path if path is None else path
    if path.startswith(("http://", "https://")):  # metrics served apart from the endpoint
        return _Target(spec, path)
    if not path.startswith("/"):
        raise ValueError(f"metrics path for {endpoint} must start with '/', got {path!r}")
    base = endpoint if "://" in endpoint else f"http://{endpoint}"
    return _Target(spec, base.rstrip("/") + path)


def _check_positive(**values: float) -> None:
    for name, value in values.items():
        if not value > 0:
            raise ValueError(f"{name} must be > 0, got {value!r}")


def _log_readiness(endpoint: str, failures: int) -> None:
    if failures:
        log.warning(
            "engine at %s not ready: %d metrics scrapes failed in a row", endpoint, failures
        )
    else:
        log.info("engine at %s ready again: metrics scrape succeeded", endpoint)
