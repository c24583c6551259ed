"""The whole stack on free loopback ports: simulated engines, a real picker, the gateway.

Pool `default/chat` has a simulated engine, pool `default/big` one fast engine that takes
huge prompts, and providers `ai/sim` (a simulated engine wanting an API key), `ai/locked`
(the same engine, with a wrong key in the backends file) and `ai/ghost` (not in the backends
file at all).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from kinference.config import parse_policy
from kinference.gateway.app import build_app
from kinference.gateway.backends import load_backends
from kinference.gateway.callers import load_api_keys
from kinference.gateway.local import LocalPicker
from kinference.gateway.server import GatewayServer
from kinference.gateway.settings import GatewaySettings
from loadtest.sim_engine import SimEngine, SimEngineConfig
from tests.conftest import MODEL, PickerFactory, RunningPicker

BIG_MODEL = "big-model"
DEAD_MODEL = "dead-model"  # its pool's endpoint is a port nobody listens on
PROVIDER_KEY = "sk-provider-secret"
KEY_ENV = "KINFERENCE_TEST_SIM_PROVIDER_KEY"
MiB = 1024 * 1024
PICKER_MAX_BODY = 8 * MiB
GATEWAY_MAX_BODY = 6 * MiB  # below the picker's: the gateway's own limit answers first
CLIENT_TIMEOUT_S = 30.0

# Decode gaps of 2.4 ms: each token is its own SSE chunk (the engines batch tokens due
# within 1 ms), and a 16-token answer takes ~40 ms.
POOL_ENGINE = SimEngineConfig(models=(MODEL,), time_scale=0.2)
# Prefill of a 5 MiB prompt (~1.3 M tokens) in well under a second.
BIG_ENGINE = SimEngineConfig(models=(BIG_MODEL,), time_scale=0.001, max_model_len=4_000_000)
PROVIDER_ENGINE = SimEngineConfig(models=(MODEL,), time_scale=0.05, api_key=PROVIDER_KEY)


def policy_text(chat: list[str], big: str, dead: str) -> str:
    return f"""
pools:
  - {{namespace: default, name: chat, endpoints: {chat}, models: ["{MODEL}"]}}
  - {{namespace: default, name: big, endpoints: ["{big}"], models: ["{BIG_MODEL}"]}}
  - {{namespace: default, name: dead, endpoints: ["{dead}"], models: ["{DEAD_MODEL}"]}}
providers:
  - {{namespace: ai, name: sim, api: openai}}
  - {{namespace: ai, name: locked, api: openai}}
  - {{namespace: ai, name: ghost, api: openai}}
models:
  - {{name: provider-model, aliases: [provider-alias],
     targets: [{{provider: ai/sim, model: "{MODEL}"}}]}}
  - {{name: locked-model, targets: [{{provider: ai/locked, model: "{MODEL}"}}]}}
  - {{name: ghost-model, targets: [{{provider: ai/ghost, model: "{MODEL}"}}]}}
tenants:
  - {{tenant: stingy, tokens_per_minute: 1}}
  - {{tenant: chat-only, models: ["{MODEL}"]}}
  - {{tenant: interactive-only, qos: [INTERACTIVE]}}
default_tenant_action: allow
"""


@dataclass
class Stack:
    picker: RunningPicker
    gateway: GatewayServer
    chat: list[SimEngine]
    big: SimEngine
    provider: SimEngine

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.gateway.port}"

    def sdk(self, api_key: str = "sk-client", **headers: str) -> openai.AsyncOpenAI:
        """The official SDK against the gateway; no retries, so each call is one request."""
        return openai.AsyncOpenAI(
            base_url=f"{self.url}/v1",
            api_key=api_key,
            max_retries=0,
            timeout=CLIENT_TIMEOUT_S,
            default_headers=headers or None,
        )

    def http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=CLIENT_TIMEOUT_S, trust_env=False)


GatewayFactory = Callable[..., Awaitable[GatewayServer]]


def free_port() -> int:
    """A loopback port nothing listens on (it was free a moment ago)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture
async def start_gateway() -> AsyncIterator[GatewayFactory]:
    """Start gateways on free ports with settings overrides; all stop at teardown."""
    started: list[GatewayServer] = []

    async def start(
        picker: str, *, hosted: RunningPicker | None = None, **overrides: Any
    ) -> GatewayServer:
        """A gateway calling `picker` over gRPC, or calling `hosted`'s service directly."""
        settings = GatewaySettings(listen="127.0.0.1:0", picker=picker, **overrides)
        opener = None
        if hosted is not None:
            app = hosted.app

            @contextlib.asynccontextmanager
            async def opener() -> AsyncIterator[LocalPicker]:
                yield LocalPicker(
                    app.service,
                    idle_timeout_s=app.settings.body_idle_timeout_s,
                    model_names=lambda: app.policy.model_names,
                    serving=lambda: not app.store.draining,
                )

        app_ = build_app(
            settings,
            load_backends(settings.backends_file),
            load_api_keys(settings.api_keys_file),
            picker=opener,
        )
        server = GatewayServer(app_, settings.listen)
        started.append(server)
        await server.start()
        return server

    yield start
    await asyncio.gather(*(server.stop() for server in started))  # each drains ~0.2 s


async def gateway_in_mode(
    mode: str, picker: RunningPicker, start_gateway: GatewayFactory, **overrides: Any
) -> GatewayServer:
    """A gateway hosting `picker`'s service ("in-process") or calling it over gRPC
    ("remote"), with settings overrides."""
    in_process = mode == "in-process"
    return await start_gateway(
        "" if in_process else picker.target,
        hosted=picker if in_process else None,
        **overrides,
    )


async def dead_pool_stack(
    mode: str, start_picker: PickerFactory, start_gateway: GatewayFactory, **overrides: Any
) -> tuple[RunningPicker, GatewayServer]:
    """A picker whose every endpoint is a port nothing listens on, and a gateway in `mode`
    in front of it (for bodies refused or timed out before any dispatch)."""
    dead = f"127.0.0.1:{free_port()}"
    picker = await start_picker(parse_policy(policy_text([dead], dead, dead)))
    return picker, await gateway_in_mode(mode, picker, start_gateway, **overrides)


@pytest.fixture
async def engines() -> AsyncIterator[list[SimEngine]]:
    """The chat engine, the big engine and the provider engine, in that order."""
    started = [SimEngine(POOL_ENGINE), SimEngine(BIG_ENGINE), SimEngine(PROVIDER_ENGINE)]
    try:
        for engine in started:
            await engine.start(host="127.0.0.1", port=0)
        yield started
    finally:
        await asyncio.gather(*(engine.stop() for engine in started))


def write_backends(tmp_path: Path, provider_url: str) -> Path:
    wrong_key = tmp_path / "locked.key"
    wrong_key.write_text("sk-wrong\n")
    path = tmp_path / "backends.yaml"
    path.write_text(
        "backends:\n"
        f"  ai/sim: {{base_url: '{provider_url}', api_key_env: {KEY_ENV}}}\n"
        f"  ai/locked: {{base_url: '{provider_url}/', api_key_file: '{wrong_key}'}}\n"
    )
    return path


@pytest.fixture(params=["remote", "in-process"])
async def stack(  # noqa: PLR0917 (fixtures)
    request: pytest.FixtureRequest,
    engines: list[SimEngine],
    start_picker: PickerFactory,
    start_gateway: GatewayFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Stack]:
    chat, big, provider = engines[:1], engines[1], engines[2]
    policy = parse_policy(
        policy_text(
            [f"127.0.0.1:{e.port}" for e in chat],
            f"127.0.0.1:{big.port}",
            f"127.0.0.1:{free_port()}",
        )
    )
    picker = await start_picker(policy, max_body_bytes=PICKER_MAX_BODY)
    monkeypatch.setenv(KEY_ENV, PROVIDER_KEY)
    gateway = await gateway_in_mode(
        request.param,
        picker,
        start_gateway,
        backends_file=write_backends(tmp_path, provider.url),
        models=f"{MODEL},provider-model",
        max_body_bytes=GATEWAY_MAX_BODY,
    )
    yield Stack(picker, gateway, chat, big, provider)
    # The gateway and the engines drain side by side (uvicorn takes ~0.2 s each; one after
    # the other they made most of a test's time); their fixtures' own stops then find them
    # stopped.
    await asyncio.gather(gateway.stop(), *(engine.stop() for engine in engines))
