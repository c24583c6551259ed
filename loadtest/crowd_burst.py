"""Admitted requests while a crowd far past the connection cap keeps knocking.

    python -m loadtest.crowd_burst [--cap 64] [--crowd 500] [--steady 16] [--rate 200]
        [--idle N] [--seconds 8]

Starts a simulated engine answering at once and `kinference gateway` in front of it (hosting
the picker) with `KINFERENCE_GATEWAY_MAX_CLIENT_CONNECTIONS=cap`. `steady` clients send
16-token chat completions on keep-alive connections (admitted: they hold their places in the
cap), `rate` a second between them (paced: the gateway has room to spare), first alone for
`seconds`, then for `seconds` again while `crowd` more clients each open a fresh
connection, send the same request, read the answer to its end and start over at once (no
back-off: the worst case for the refusal path), and `idle` connections (by default the
cap's places the steady ones leave) sit idle, so that the whole crowd is past the cap
(`--idle 0`: the crowd takes the places left). Printed: the steady clients' latency
p50/p99/max alone and under the crowd, the crowd's outcomes (200, 503 with Retry-After,
reset or closed without an answer, no answer within 10 s), refusals per second, the
gateway's CPU seconds in each phase and what the crowd added per refusal.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

from kinference.gateway.http1 import HttpClient
from kinference.gateway.http1_conn import UpstreamError
from loadtest import gateway_systems as systems
from loadtest.gateway_systems import MODEL, cpu_seconds
from loadtest.servers import ServerSpec

ANSWER_S = 10.0  # a crowd client with no whole answer by then counts as a hang
BODY = json.dumps(
    {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Summarise: " + "lorem ipsum " * 80}],
        "max_tokens": 16,
    }
).encode()


def _engine_argv(listen: str) -> list[str]:
    port = listen.rpartition(":")[2]
    return [sys.executable, "-m", "loadtest.sim_engine", "--port", port, "--time-scale", "0"]


def _request(host: str) -> bytes:
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: %s\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (host.encode(), len(BODY), BODY)
    )


async def _crowd_one(host: str, port: int, request: bytes) -> str:
    """One fresh connection's outcome: "200", "503" (with Retry-After), "reset", "hang"."""
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        return "connect failed"
    try:
        async with asyncio.timeout(ANSWER_S):
            writer.write(request)
            await writer.drain()
            data = await reader.read()
    except TimeoutError:
        return "hang"
    except OSError:
        return "reset"
    finally:
        writer.close()
    if not data.startswith(b"HTTP/1.1 "):
        return "reset"  # closed without an answer
    status = data[9:12].decode()
    if status == "503" and b"\r\nretry-after: " not in data.split(b"\r\n\r\n")[0].lower():
        return "503 without retry-after"
    return status


async def _steady(
    client: HttpClient, url: str, until: float, into: list[float], every_s: float
) -> int:
    """A request every `every_s` (or at once when late) until `until`; latencies (s) into
    `into`; returns the number not answered 200."""
    failed = 0
    next_at = time.perf_counter() + random.uniform(0, every_s)
    while next_at < until:
        await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
        began = time.perf_counter()
        next_at = max(next_at + every_s, began)
        try:
            status = await systems.post_drained(client, url, BODY)
        except (OSError, UpstreamError):
            failed += 1
            continue
        if status == 200:
            into.append(time.perf_counter() - began)
        else:
            failed += 1
    return failed


def _pcts(latencies: list[float]) -> str:
    ordered = sorted(latencies)
    if not ordered:
        return "none"

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    return f"n {len(ordered)} p50 {at(0.5):.2f} p99 {at(0.99):.2f} max {ordered[-1] * 1000:.2f} ms"


async def run(args: argparse.Namespace) -> None:
    os.environ["KINFERENCE_GATEWAY_MAX_CLIENT_CONNECTIONS"] = str(args.cap)
    with tempfile.TemporaryDirectory(prefix="crowd-burst-") as tmp:
        spec = ServerSpec("sim-engine", _engine_argv)
        async with systems.started(spec, ["kinference"], Path(tmp), BODY) as up:
            gateway = up[1]
            host, _, port = gateway.url.removeprefix("http://").rpartition(":")
            url = f"{gateway.url}/v1/chat/completions"
            client = HttpClient(connect_timeout_s=10, read_timeout_s=60)
            every_s = args.steady / args.rate
            warm: list[float] = []
            await asyncio.gather(
                *(
                    _steady(client, url, time.perf_counter() + 1, warm, every_s)
                    for _ in range(args.steady)
                )
            )
            alone: list[float] = []
            cpu_before = cpu_seconds(gateway.pids[0])
            until = time.perf_counter() + args.seconds
            await asyncio.gather(
                *(_steady(client, url, until, alone, every_s) for _ in range(args.steady))
            )
            cpu_alone = cpu_seconds(gateway.pids[0]) - cpu_before
            crowded: list[float] = []
            outcomes: collections.Counter[str] = collections.Counter()
            request = _request(host)
            cpu_before = cpu_seconds(gateway.pids[0])
            began = time.perf_counter()
            until = began + args.seconds

            async def knock() -> None:
                while time.perf_counter() < until:
                    outcomes[await _crowd_one(host, int(port), request)] += 1

            idle_count = args.cap - args.steady if args.idle is None else args.idle
            idle = [await asyncio.open_connection(host, int(port)) for _ in range(idle_count)]
            crowd = [asyncio.create_task(knock()) for _ in range(args.crowd)]
            steady_failed = sum(
                await asyncio.gather(
                    *(_steady(client, url, until, crowded, every_s) for _ in range(args.steady))
                )
            )
            await asyncio.gather(*crowd)
            for _reader, writer in idle:
                writer.close()
            took = time.perf_counter() - began
            cpu = cpu_seconds(gateway.pids[0]) - cpu_before
            await client.aclose()
    print(
        f"cap {args.cap}, {args.steady} steady clients, {idle_count} idle connections, "
        f"crowd of {args.crowd}"
    )
    print(f"  steady alone:       {_pcts(alone)}")
    print(f"  steady under crowd: {_pcts(crowded)}, not 200: {steady_failed}")
    refused = outcomes["503"]
    extra_us = (cpu - cpu_alone * took / args.seconds) / max(refused, 1) * 1e6
    print(
        f"  crowd over {took:.1f} s: {dict(outcomes)}; {refused / took:.0f} refusals/s; "
        f"gateway CPU {cpu_alone:.2f} s alone, {cpu:.2f} s under the crowd "
        f"(~{extra_us:.0f} us more per refusal)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cap", type=int, default=64, help="the gateway's connection cap")
    parser.add_argument("--crowd", type=int, default=500, help="crowd clients at once")
    parser.add_argument("--steady", type=int, default=16, help="admitted clients")
    parser.add_argument("--rate", type=float, default=200.0, help="their requests per second")
    parser.add_argument(
        "--idle", type=int, help="idle connections held in the crowd phase (cap - steady)"
    )
    parser.add_argument("--seconds", type=float, default=8.0, help="per phase")
    args = parser.parse_args()
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        asyncio.run(run(args))
    else:
        uvloop.run(run(args))


if __name__ == "__main__":
    main()
