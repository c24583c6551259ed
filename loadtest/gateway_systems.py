"""The systems `loadtest.bench_gateway` puts in front of one simulated engine, as subprocesses.

Each is started with its project's defaults (no tuning), on loopback, with nothing fetched
from the network: kinference's gateway hosting the picker (the default), kinference's
gateway with a separate `kinference serve` (remote mode), LiteLLM's proxy, vllm-router and
sglang-router. `System.pids` are the processes whose CPU counts as the system's.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from kinference.gateway.http1 import HttpClient
from loadtest.routing_bench.peers import (
    OFFLINE_ENV,
    Peer,
    installed,
    peer_running,
)
from loadtest.servers import (
    ServerProcess,
    ServerSpec,
    free_port,
    kinference_spec,
    running,
    spawn,
    stop,
)

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
READY_TIMEOUT_S = 90.0  # LiteLLM's proxy takes a while to import
LITELLM_SCRIPT = "litellm"
# Each project's default routing policy: one engine, so it decides nothing here.
VLLM_ROUTER = Peer("vllm-router", "vllm-router", (), ("--log-level", "warning"))
SGLANG_ROUTER = Peer("sglang-router", "sglang-router", ("launch",), ("--log-level", "warn"))


@dataclass
class System:
    """A running system: where to send requests and which processes it spends CPU in."""

    name: str
    url: str  # base URL, no trailing slash
    pids: list[int] = field(default_factory=list)
    baseline: bool = False  # the engine itself: what the others add to


def policy_file(log_dir: Path, engine: str) -> Path:
    path = log_dir / "policy.yaml"
    path.write_text(
        "pools:\n  - {namespace: default, name: chat, "
        f'endpoints: ["{engine}"], models: ["{MODEL}"]}}\n'
    )
    return path


def gateway_spec(extra: list[str], env: dict[str, str]) -> ServerSpec:
    def argv(listen: str) -> list[str]:
        return [sys.executable, "-m", "kinference", "gateway", "--listen", listen, *extra]

    return ServerSpec("gateway", argv, env={"KINFERENCE_GATEWAY_LOG_LEVEL": "WARNING", **env})


def litellm_spec(log_dir: Path, engine: str) -> ServerSpec:
    config = log_dir / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        f"  - model_name: {MODEL}\n"
        "    litellm_params:\n"
        f"      model: hosted_vllm/{MODEL}\n"
        f"      api_base: http://{engine}/v1\n"
        "      api_key: none\n"
        "litellm_settings:\n  telemetry: false\n"
    )
    binary = str(Path(sys.executable).with_name(LITELLM_SCRIPT))

    def argv(listen: str) -> list[str]:
        port = listen.rpartition(":")[2]
        return [binary, "--config", str(config), "--host", "127.0.0.1", "--port", port]

    env = {
        **OFFLINE_ENV,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_LOG": "ERROR",
        # No auth anywhere in this benchmark (the engine and the other routers have none).
        "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
    }
    return ServerSpec("litellm", argv, env=env)


def litellm_installed() -> bool:
    return Path(sys.executable).with_name(LITELLM_SCRIPT).exists()


@contextlib.asynccontextmanager
async def kinference_in_process(
    log_dir: Path, engine: str, log_level: str = "WARNING"
) -> AsyncIterator[System]:
    """The gateway hosting the picker; `log_level` INFO is the CLI's default, with uvicorn's
    access log (a line a request, into the log file as a pod's stderr would go)."""
    policy = policy_file(log_dir, engine)
    extra = ["--config", str(policy), "--grpc-listen", f"127.0.0.1:{free_port()}"]
    env = {"KINFERENCE_METRICS_LISTEN": "", "KINFERENCE_GATEWAY_LOG_LEVEL": log_level}
    async with http_process(gateway_spec(extra, env), log_dir, "/health") as gateway:
        name = "kinference" if log_level == "WARNING" else f"kinference, log {log_level}"
        yield System(name, f"http://{gateway.address}", [gateway.pid])


@contextlib.asynccontextmanager
async def kinference_remote(log_dir: Path, engine: str) -> AsyncIterator[System]:
    policy = policy_file(log_dir, engine)
    async with running(kinference_spec(policy), log_dir) as picker:
        spec = gateway_spec(["--picker", picker.address, "--config", str(policy)], {})
        async with http_process(spec, log_dir, "/health") as gateway:
            yield System(
                "kinference remote",
                f"http://{gateway.address}",
                [gateway.pid, picker.pid],
            )


@contextlib.asynccontextmanager
async def litellm(log_dir: Path, engine: str) -> AsyncIterator[System]:
    async with http_process(litellm_spec(log_dir, engine), log_dir, "/health/liveliness") as proxy:
        yield System("litellm", f"http://{proxy.address}", [proxy.pid])


@contextlib.asynccontextmanager
async def peer(peer: Peer, log_dir: Path, engine: str, probe: bytes) -> AsyncIterator[System]:
    async with peer_running(peer, [f"http://{engine}"], probe, log_dir) as router:
        yield System(peer.name, router.url, [router.process.pid])


Opener = Callable[[], AbstractAsyncContextManager[System]]


def openers(log_dir: Path, engine: str, probe: bytes) -> dict[str, Opener]:
    """Every system the gateway benchmarks know, by name, in front of `engine`; `probe` is
    a body the peers are asked with until they answer."""
    return {
        "kinference": lambda: kinference_in_process(log_dir, engine),
        "kinference-info": lambda: kinference_in_process(log_dir, engine, "INFO"),
        "kinference-remote": lambda: kinference_remote(log_dir, engine),
        "litellm": lambda: litellm(log_dir, engine),
        "vllm-router": lambda: peer(VLLM_ROUTER, log_dir, engine, probe),
        "sglang-router": lambda: peer(SGLANG_ROUTER, log_dir, engine, probe),
    }


@contextlib.asynccontextmanager
async def started(
    engine_spec: ServerSpec, names: list[str], log_dir: Path, probe: bytes
) -> AsyncIterator[list[System]]:
    """The engine (first: the baseline, asked directly) and every system named that can
    run here, in front of it."""
    async with contextlib.AsyncExitStack() as stack:
        engine = await stack.enter_async_context(http_process(engine_spec, log_dir, "/health"))
        address = engine.address
        up = [System("engine (direct)", f"http://{address}", [engine.pid], baseline=True)]
        present = peers_installed()
        known = openers(log_dir, address, probe)
        for name in names:
            if not present.get(name, True):
                print(f"skipped {name}: not installed", file=sys.stderr)
                continue
            up.append(await stack.enter_async_context(known[name]()))
        yield up


def peers_installed() -> dict[str, bool]:
    return {
        "litellm": litellm_installed(),
        VLLM_ROUTER.name: installed(VLLM_ROUTER),
        SGLANG_ROUTER.name: installed(SGLANG_ROUTER),
    }


@contextlib.asynccontextmanager
async def http_process(
    spec: ServerSpec, log_dir: Path, ready_path: str
) -> AsyncIterator[ServerProcess]:
    """An HTTP server subprocess answering 200 on `ready_path`; stopped on exit."""
    server = spawn(spec, log_dir)
    try:
        await wait_http(server, f"http://{server.address}{ready_path}")
        yield server
    except BaseException:
        print(f"--- {spec.label} output ---\n{server.log_tail()}", file=sys.stderr)
        raise
    finally:
        stop(server)


async def wait_http(server: ServerProcess, url: str) -> None:
    """Poll `url` until it answers 200, failing if the server dies or never gets there."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    async with httpx.AsyncClient(trust_env=False, timeout=1.0) as http:
        while True:
            server.check_alive()
            with contextlib.suppress(httpx.TransportError):
                if (await http.get(url)).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{server.spec.label} not answering {url}")
            await asyncio.sleep(0.05)  # polling for readiness, bounded by the deadline


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far, seconds (all threads; children not counted)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _single(body: bytes) -> AsyncIterator[bytes]:
    yield body


async def post_drained(client: HttpClient, url: str, body: bytes) -> int:
    """POST a JSON `body` and read the whole answer (streamed or not); returns its status."""
    headers = [("content-type", "application/json"), ("content-length", str(len(body)))]
    response = await client.request("POST", url, headers, _single(body))
    try:
        async for _chunk in response.chunks():
            pass
    finally:
        response.close()
    return response.status
