"""The simulated engines in their own process, and their counters read over /metrics.

The engines run in `loadtest.routing_bench.engine_host` (one process, one event loop for
all of them) so the load generator's loop, busy parsing streams, does not delay their
timers. Every run gets fresh engines: each router starts from cold caches. Ready: the host
printed its URLs and every engine's `/health` answers 200 (polled, never a fixed sleep).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from loadtest.servers import REPO_ROOT

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
# vLLM counter names the simulated engine serves; summed over their label sets.
SIM_COUNTERS = {
    "queries": "vllm:prefix_cache_queries_total",
    "hits": "vllm:prefix_cache_hits_total",
    "prompt": "vllm:prompt_tokens_total",
    "generation": "vllm:generation_tokens_total",
    "requests": "vllm:request_success_total",
}


@dataclass(frozen=True)
class EngineSetup:
    """How the engines are sized and how fast they run (see SimEngineConfig)."""

    count: int = 8
    time_scale: float = 1.0
    capacity_blocks: int = 1536
    max_num_seqs: int = 4
    stream_step_s: float = 0.1  # tokens due within 0.1 s share one SSE chunk: less CPU
    seed: int = 0
    slow_fraction: float = 0.0  # the last engines, this share of them, are slower ...
    slow_factor: float = 2.0  # ... by this factor at every step (prefill and decode)
    prefill_side_by_side: bool = False  # the old simulator: no shared prefill (prefill.py)

    def argv(self) -> list[str]:
        return [
            sys.executable, "-m", "loadtest.routing_bench.engine_host",
            "--count", str(self.count),
            "--seed", str(self.seed),
            "--time-scale", str(self.time_scale),
            "--capacity-blocks", str(self.capacity_blocks),
            "--max-num-seqs", str(self.max_num_seqs),
            "--stream-step-s", str(self.stream_step_s),
            "--slow-fraction", str(self.slow_fraction),
            "--slow-factor", str(self.slow_factor),
            *(["--prefill-side-by-side"] if self.prefill_side_by_side else []),
        ]  # fmt: skip


@dataclass
class EngineProcess:
    process: subprocess.Popen[bytes]
    log_path: Path

    def log_tail(self, max_chars: int = 4000) -> str:
        text = self.log_path.read_text(errors="replace")
        return text[-max_chars:] if text else "(no output)"

    def check_alive(self) -> None:
        if (code := self.process.poll()) is not None:
            raise RuntimeError(f"the simulated engines exited with {code}:\n{self.log_tail()}")

    def announced_urls(self) -> list[str] | None:
        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.startswith('{"urls"'):
                return [str(url) for url in json.loads(line)["urls"]]
        return None


async def _wait_ready(engines: EngineProcess, timeout_s: float = READY_TIMEOUT_S) -> list[str]:
    """The engines' URLs, once each answers /health."""
    started = time.perf_counter()
    urls: list[str] | None = None
    pending: list[str] = []
    delay = 0.05
    async with httpx.AsyncClient(trust_env=False, timeout=2.0) as http:
        while urls is None or pending:
            engines.check_alive()
            if urls is None and (urls := engines.announced_urls()) is not None:
                pending = list(urls)
            for url in list(pending):
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(f"{url}/health")).status_code == 200:
                        pending.remove(url)
            if urls is not None and not pending:
                break
            if time.perf_counter() - started > timeout_s:
                raise TimeoutError(f"engines not healthy after {timeout_s:.0f} s: {pending}")
            await asyncio.sleep(delay)  # polling for readiness, bounded by the deadline
            delay = min(delay * 2, 0.5)
    return urls


@dataclass
class Engines:
    urls: list[str]
    process: EngineProcess


def _spawn(setup: EngineSetup, log_dir: Path) -> EngineProcess:
    fd, log_name = tempfile.mkstemp(prefix="sim-engines-", suffix=".log", dir=log_dir)
    try:
        process = subprocess.Popen(
            setup.argv(),
            cwd=REPO_ROOT,
            env=dict(os.environ),
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=subprocess.STDOUT,
        )
    finally:
        os.close(fd)
    return EngineProcess(process, Path(log_name))


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.asynccontextmanager
async def engines_running(setup: EngineSetup, log_dir: Path) -> AsyncIterator[Engines]:
    """Fresh engines, healthy; stopped on exit (their log printed if they died)."""
    engines = _spawn(setup, log_dir)
    try:
        yield Engines(await _wait_ready(engines), engines)
    finally:
        died = engines.process.poll() is not None
        if not died:
            _stop(engines.process)
        if died:
            print(f"\n--- simulated engines ---\n{engines.log_tail()}", file=sys.stderr)


def parse_counters(page: str, counters: Mapping[str, str] = SIM_COUNTERS) -> dict[str, float]:
    """`counters` (report key -> counter name) from a Prometheus text page, each summed over
    its label sets; 0 for one the page does not have (yet)."""
    wanted = {name: key for key, name in counters.items()}
    totals = dict.fromkeys(counters, 0.0)
    for line in page.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in wanted:
            totals[wanted[name]] += float(line.rsplit(" ", 1)[1])
    return totals


async def read_counters(
    http: httpx.AsyncClient, metrics_urls: list[str], counters: Mapping[str, str]
) -> list[dict[str, float]]:
    """Every engine's counters, in the order of `metrics_urls` (their Prometheus pages)."""
    pages = await asyncio.gather(*(http.get(url) for url in metrics_urls))
    return [parse_counters(page.text, counters) for page in pages]


def counter_deltas(
    before: list[dict[str, float]], after: list[dict[str, float]]
) -> list[dict[str, float]]:
    pairs = zip(before, after, strict=True)
    return [{key: end[key] - start[key] for key in end} for start, end in pairs]
