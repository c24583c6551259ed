"""How each router under test gets a request to an engine.

- `GatewayDriver`: the load generator acts as the gateway in front of kinference replicas
  (PushBody, Pick, PullBody, POST to the picked engine, ReportFirstToken when the first
  token arrives, ReportFinalToken with TTFT, ITL and usage), spreading requests over the
  replicas round-robin as a Kubernetes Service would.
- `DirectDriver`: round-robin, seeded random or least-in-flight over the engines, in the
  load generator (no router process, no cost).
- `ProxyDriver`: POST to a router that proxies (kinference's gateway, sglang-router,
  vllm-router, Dynamo's frontend); over several (gateway replicas) round-robin, as a
  Kubernetes Service spreads requests.

Every driver times a request from before its first call (Push, or the POST) to the first
content chunk, so the picker's own cost counts in its TTFT.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from dataclasses import dataclass
from typing import Protocol

import httpx

from kinference.client import PickerClient, split_chunks
from kinference.v1 import picker_pb2 as pb
from loadtest.flows import ACCEPTED_OUTCOMES, CLIENT_OPTIONS, FlowError
from loadtest.routing_bench.stream import StreamResult, stream_chat
from loadtest.routing_bench.workload import MODEL

# One connection per replica per load generator would serialise nothing (HTTP/2), but a
# separate subchannel per client keeps replicas' channels independent.
CALLER_OPTIONS = [*CLIENT_OPTIONS, ("grpc.use_local_subchannel_pool", 1)]


@dataclass(frozen=True)
class Outcome:
    """One completed request as its caller saw it."""

    stream: StreamResult
    engine: str  # "host:port" when the driver knows it, else ""
    pick_s: float = 0.0  # Push + Pick + Pull, for the gateway driver


class Driver(Protocol):
    async def send(self, body: bytes) -> Outcome: ...

    async def close(self) -> None: ...


def http_client() -> httpx.AsyncClient:
    """Keep-alive pool for many concurrent streams; never through a proxy (loopback only)."""
    limits = httpx.Limits(max_connections=1024, max_keepalive_connections=256)
    timeout = httpx.Timeout(120.0, connect=10.0)
    return httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False)


DIRECT_POLICIES = ("round_robin", "random", "least_inflight")


class DirectDriver:
    """Cache-blind baselines over the engine URLs: `round_robin`, `random` (seeded), or
    `least_inflight` (fewest requests under way from this load generator, ties in
    round-robin order)."""

    def __init__(self, urls: list[str], policy: str, seed: int) -> None:
        if policy not in DIRECT_POLICIES:
            raise ValueError(f"unknown policy {policy!r}")
        self.urls = urls
        self.policy = policy
        self.inflight = dict.fromkeys(urls, 0)
        self._rng = random.Random(seed)
        self._next = itertools.cycle(range(len(urls)))
        self.http = http_client()

    def choose(self) -> str:
        if self.policy == "random":
            return self._rng.choice(self.urls)
        start = next(self._next)
        if self.policy == "round_robin":
            return self.urls[start]
        order = self.urls[start:] + self.urls[:start]
        return min(order, key=self.inflight.__getitem__)  # the first of the least busy

    async def send(self, body: bytes) -> Outcome:
        url = self.choose()
        self.inflight[url] += 1
        try:
            result = await stream_chat(self.http, url, body, time.perf_counter())
        finally:
            self.inflight[url] -= 1
        return Outcome(result, url.removeprefix("http://"))

    async def close(self) -> None:
        await self.http.aclose()


class ProxyDriver:
    """Routers that proxy the request themselves (replicas of one, round-robin); which
    engine served it is not known here."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self._next = itertools.cycle(urls)
        self.http = http_client()

    async def send(self, body: bytes) -> Outcome:
        url = next(self._next)
        return Outcome(await stream_chat(self.http, url, body, time.perf_counter()), "")

    async def close(self) -> None:
        await self.http.aclose()


class GatewayDriver:
    """A conformant kinference caller in front of `addresses` (replicas, round-robin)."""

    def __init__(self, addresses: list[str]) -> None:
        self.pickers = [PickerClient(a, options=CALLER_OPTIONS) for a in addresses]
        self._next = itertools.cycle(range(len(addresses)))
        self.http = http_client()

    async def _route(self, picker: PickerClient, body: bytes) -> tuple[pb.PickResponse, bytes]:
        pushed = await picker.push(split_chunks(body), declared_length=len(body))
        picked = await picker.pick(pushed.stream_id)
        if picked.outcome not in ACCEPTED_OUTCOMES or picked.WhichOneof("destination") != "local":
            outcome = pb.PickResponse.Outcome.Name(picked.outcome)
            raise FlowError(f"Pick answered {outcome} without a local target: {picked.reason!r}")
        pulled = await picker.pull_all(picked.response_id)
        if len(pulled) != picked.body_total_bytes:
            raise FlowError(f"PullBody sent {len(pulled)} of {picked.body_total_bytes} bytes")
        return picked, pulled

    async def send(self, body: bytes) -> Outcome:
        picker = self.pickers[next(self._next)]
        started = time.perf_counter()
        picked, pulled = await self._route(picker, body)
        pick_s = time.perf_counter() - started
        endpoint = str(picked.local.endpoint)
        response_id = picked.response_id
        first: list[asyncio.Task[None]] = []  # the report, sent as the first token arrives

        def on_first(ttft_s: float) -> None:
            ttft_ms = max(round(ttft_s * 1000), 1)
            first.append(asyncio.create_task(_report_first(picker, response_id, ttft_ms)))

        try:
            result = await stream_chat(self.http, f"http://{endpoint}", pulled, started, on_first)
        except BaseException:
            await asyncio.gather(*first, return_exceptions=True)
            await picker.abort(response_id, detail="benchmark: upstream failed")
            raise
        await asyncio.gather(*first)  # the final report must follow the first-token one
        await picker.final_token(
            response_id,
            model=MODEL,
            prompt_tokens=result.prompt_tokens,
            completion_tokens=result.completion_tokens,
            cached_tokens=result.cached_tokens,
            itl_bucket_counts=result.itl_buckets(),
        )
        return Outcome(result, endpoint, pick_s)

    async def close(self) -> None:
        await asyncio.gather(*(picker.close() for picker in self.pickers))
        await self.http.aclose()


async def _report_first(picker: PickerClient, response_id: int, ttft_ms: int) -> None:
    await picker.first_token(response_id, ttft_ms=ttft_ms)
