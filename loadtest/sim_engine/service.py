"""The engine's HTTP routes (Starlette): OpenAI generation, vLLM render, models, health,
metrics. One `EngineService` per simulated engine holds its cost model and scheduler.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Send

from loadtest.engine_model import EngineModel
from loadtest.sim_engine.config import SimEngineConfig
from loadtest.sim_engine.metrics import SimMetrics
from loadtest.sim_engine.prefill import Prefill, PrefillLane, SideBySide
from loadtest.sim_engine.protocol import (
    ApiError,
    GenerateRequest,
    Kind,
    parse_request,
    unauthorized,
)
from loadtest.sim_engine.responses import Reply, rendered, usage
from loadtest.sim_engine.scheduler import Job, Scheduler
from loadtest.sim_engine.tokens import CHARS_PER_TOKEN, Vocabulary

_PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


class EventStream(StreamingResponse):
    """An SSE response that always closes its generator, so a job's batch slot is freed
    even when the client goes away between two chunks."""

    media_type = "text/event-stream"

    async def stream_response(self, send: Send) -> None:
        try:
            await super().stream_response(send)
        finally:
            close = getattr(self.body_iterator, "aclose", None)
            if close is not None:
                await close()


class EngineService:
    """One simulated engine: its prefix cache, scheduler, metrics, and HTTP routes."""

    def __init__(self, config: SimEngineConfig) -> None:
        self.config = config
        self.metrics = SimMetrics(config.models)
        engine = EngineModel(
            config.capacity_blocks,
            config.block_chars,
            config.seed,
            chars_per_token=CHARS_PER_TOKEN,
            timing=config.timing,
        )
        loop_time = asyncio.get_running_loop().time
        self.scheduler = Scheduler(
            engine,
            self.metrics,
            _prefill(engine, config),
            max_num_seqs=config.max_num_seqs,
            time_scale=config.time_scale,
            stream_step_s=config.stream_step_s,
            clock=loop_time,
        )
        self.metrics.watch(self.scheduler)
        self._clock = loop_time
        self._vocabulary = Vocabulary(config.seed)
        self._ids = 0
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/completions", self._completion, methods=["POST"]),
                Route("/v1/chat/completions/render", self._render_chat, methods=["POST"]),
                Route("/v1/completions/render", self._render_completion, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/health", self._health, methods=["GET"]),
                Route("/metrics", self._metrics, methods=["GET"]),
            ],
            exception_handlers={ApiError: _error_response},
        )

    def stats(self) -> dict[str, int]:
        metrics = self.metrics
        return {
            "requests": metrics.requests,
            "finished": metrics.finished_requests,
            "prompt_tokens": metrics.prompt_tokens,
            "cached_tokens": metrics.cached_tokens,
            "completion_tokens": metrics.completion_tokens,
            "running": self.scheduler.running,
            "waiting": self.scheduler.waiting,
        }

    # -- routes ----------------------------------------------------------------------------

    async def _chat(self, request: Request) -> Response:
        return await self._generate(request, "chat")

    async def _completion(self, request: Request) -> Response:
        return await self._generate(request, "completion")

    async def _render_chat(self, request: Request) -> Response:
        parsed = await self._parse(request, "chat")
        return JSONResponse(rendered(parsed, self._request_id("chatcmpl")))

    async def _render_completion(self, request: Request) -> Response:
        parsed = await self._parse(request, "completion")
        return JSONResponse([rendered(parsed, self._request_id("cmpl"))])

    async def _models(self, request: Request) -> Response:
        self._authorize(request)
        created = int(time.time())
        data = [
            {
                "id": model,
                "object": "model",
                "created": created,
                "owned_by": "kinference-sim",
                "root": model,
                "parent": None,
                "max_model_len": self.config.max_model_len,
            }
            for model in self.config.models
        ]
        return JSONResponse({"object": "list", "data": data})

    async def _health(self, request: Request) -> Response:
        return Response(status_code=200)

    async def _metrics(self, request: Request) -> Response:
        return PlainTextResponse(self.metrics.page(), media_type=_PROMETHEUS_TEXT)

    # -- generation ------------------------------------------------------------------------

    async def _generate(self, request: Request, kind: Kind) -> Response:
        parsed = await self._parse(request, kind)
        job = Job(
            model=parsed.model,
            prompt=parsed.prompt,
            completion=self._vocabulary.completion(parsed.max_tokens),
            tokens=parsed.max_tokens,
            arrived_at=self._clock(),
            finish_reason="length" if parsed.explicit_max else "stop",
        )
        reply = Reply(parsed, self._request_id("chatcmpl" if kind == "chat" else "cmpl"), _now())
        if parsed.stream:
            return EventStream(self._stream(job, reply), headers={"Cache-Control": "no-cache"})
        async with contextlib.aclosing(self.scheduler.generate(job)) as steps:
            async for _ in steps:
                pass
        return JSONResponse(reply.whole(job.completion, job.finish_reason, _usage(job)))

    async def _stream(self, job: Job, reply: Reply) -> AsyncIterator[bytes]:
        sent = 0  # characters of the completion sent so far
        async with contextlib.aclosing(self.scheduler.generate(job)) as steps:
            async for count in steps:
                end = sent + count * CHARS_PER_TOKEN
                head = reply.opening() if sent == 0 else b""
                yield head + reply.chunk(job.completion[sent:end])
                sent = end
        yield reply.closing(job.finish_reason, _usage(job))

    async def _parse(self, request: Request, kind: Kind) -> GenerateRequest:
        self._authorize(request)
        return parse_request(kind, await request.body(), self.config)

    def _authorize(self, request: Request) -> None:
        key = self.config.api_key
        if key is None:
            return
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {key}".encode()):
            raise unauthorized()

    def _request_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}-sim{self.config.seed:x}-{self._ids:08x}"


def _prefill(engine: EngineModel, config: SimEngineConfig) -> Prefill:
    if config.prefill_side_by_side:
        return SideBySide(engine, time_scale=config.time_scale)
    return PrefillLane(
        engine, budget_tokens=config.max_num_batched_tokens, time_scale=config.time_scale
    )


def _usage(job: Job) -> dict[str, Any]:
    assert job.admission is not None  # set when the job was scheduled
    return usage(job.admission, job.tokens)


def _now() -> int:
    return int(time.time())


async def _error_response(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return JSONResponse(exc.body, status_code=exc.status)
