"""What the reference gateway adds: the same requests straight to an engine and through it.

    python -m loadtest.bench_gateway [--requests 2000] [--concurrency 16] [--quick]

Three processes, as deployed: a simulated engine answering at once (`--time-scale 0`, so
what is measured is the serving path, not generation), the picker (`kinference serve`) and
the gateway (`kinference gateway`). A client in this process sends chat completions, whole
and streamed, first directly to the engine, then through the gateway, with a fixed number of
requests in flight. It prints latency percentiles and throughput for each path, and the CPU
the picker and gateway spent per request. Traffic stays on the loopback interface and the run
stops after `--requests` requests per case.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from loadtest.servers import ServerProcess, ServerSpec, kinference_spec, running, spawn, stop

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
READY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Figures:
    label: str
    median_ms: float
    p95_ms: float
    p99_ms: float
    per_s: float

    def line(self) -> str:
        return (
            f"{self.label:<28} median {self.median_ms:6.2f} ms  p95 {self.p95_ms:6.2f} ms  "
            f"p99 {self.p99_ms:6.2f} ms  {self.per_s:7.0f} req/s"
        )


def chat_body(stream: bool, max_tokens: int) -> bytes:
    prompt = "Summarise the following notes. " + "lorem ipsum dolor sit amet " * 40
    request = {
        "model": MODEL,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    return json.dumps(request).encode()


async def measure(
    http: httpx.AsyncClient, url: str, body: bytes, *, requests: int, concurrency: int, label: str
) -> Figures:
    """`requests` POSTs of `body` with `concurrency` in flight; every answer read to the end."""
    latencies: list[float] = []
    remaining = iter(range(requests))

    async def worker() -> None:
        for _ in remaining:
            started = time.perf_counter()
            async with http.stream("POST", url, content=body) as response:
                async for _chunk in response.aiter_raw():
                    pass
                response.raise_for_status()
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    latencies.sort()
    return Figures(
        label,
        statistics.median(latencies) * 1000,
        latencies[int(len(latencies) * 0.95)] * 1000,
        latencies[int(len(latencies) * 0.99)] * 1000,
        len(latencies) / elapsed,
    )


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
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def http_server(
    spec: ServerSpec, log_dir: Path, ready_path: str
) -> AsyncIterator[ServerProcess]:
    """An HTTP server subprocess answering `ready_path`."""
    server = spawn(spec, log_dir)
    try:
        await wait_http(server, f"http://{server.address}{ready_path}")
        yield server
    except BaseException:
        print(f"--- {spec.label} output ---\n{server.log_tail()}", file=sys.stderr)
        raise
    finally:
        stop(server)


def engine_spec() -> ServerSpec:
    def argv(listen: str) -> list[str]:
        port = listen.rpartition(":")[2]
        return [sys.executable, "-m", "loadtest.sim_engine", "--port", port, "--time-scale", "0"]

    return ServerSpec("sim-engine", argv)


def gateway_spec(picker: str) -> ServerSpec:
    def argv(listen: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "kinference",
            "gateway",
            "--listen",
            listen,
            "--picker",
            picker,
        ]

    return ServerSpec("gateway", argv, env={"KINFERENCE_GATEWAY_LOG_LEVEL": "WARNING"})


async def run(requests: int, concurrency: int, max_tokens: int) -> list[Figures]:
    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as tmp:
        log_dir = Path(tmp)
        async with http_server(engine_spec(), log_dir, "/health") as engine:
            policy = log_dir / "policy.yaml"
            policy.write_text(
                "pools:\n  - {namespace: default, name: chat, "
                f'endpoints: ["{engine.address}"], models: ["{MODEL}"]}}\n'
            )
            async with (
                running(kinference_spec(policy), log_dir) as picker,
                http_server(gateway_spec(picker.address), log_dir, "/healthz") as gateway,
            ):
                servers = {"engine": engine, "gateway": gateway, "picker": picker}
                return await _cases(servers, requests, concurrency, max_tokens)


async def _cases(
    servers: dict[str, ServerProcess], requests: int, concurrency: int, tokens: int
) -> list[Figures]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    engine = f"http://{servers['engine'].address}/v1/chat/completions"
    gateway = f"http://{servers['gateway'].address}/v1/chat/completions"
    figures = []
    async with httpx.AsyncClient(trust_env=False, timeout=30.0, limits=limits) as http:
        for stream in (False, True):
            body = chat_body(stream, tokens)
            kind = "streamed" if stream else "whole"
            run = {"requests": requests, "concurrency": concurrency}
            await measure(
                http, gateway, body, requests=concurrency * 4, concurrency=concurrency, label="-"
            )
            figures.append(await measure(http, engine, body, **run, label=f"direct, {kind}"))
            before = {name: server.cpu_seconds() for name, server in servers.items()}
            figures.append(await measure(http, gateway, body, **run, label=f"gateway, {kind}"))
            for name in ("gateway", "picker", "engine"):
                spent_ms = (servers[name].cpu_seconds() - before[name]) * 1000 / requests
                print(f"{kind}: {name} CPU per request through the gateway: {spent_ms:.2f} ms")
    return figures


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--requests", type=int, default=2000, help="per case")
    cli.add_argument("--concurrency", type=int, default=16, help="requests in flight")
    cli.add_argument("--max-tokens", type=int, default=16)
    cli.add_argument("--quick", action="store_true", help="200 requests, 4 in flight")
    args = cli.parse_args(argv)
    requests, concurrency = (200, 4) if args.quick else (args.requests, args.concurrency)
    figures = asyncio.run(run(requests, concurrency, args.max_tokens))
    for figure in figures:
        print(figure.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
