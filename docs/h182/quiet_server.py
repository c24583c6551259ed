"""`QuietServer` (gateway/server.py, shared with the simulated engines) stopped at odd
moments, on asyncio and on uvloop:

    python -m docs.h182.quiet_server

- exit() before serve(): serve starts, goes straight to its shutdown and returns;
- exit() twice, and from inside a request: one drain, serve returns once;
- exit() while a response streams: the stream is finished whole (the drain waits for it,
  within `timeout_graceful_shutdown`), no new connection is accepted meanwhile;
- exit() with a stream longer than the grace: it is cancelled at the grace, serve returns;
- main_loop wakes for exit() at once (not at its 0.1 s tick): `exit -> main loop ends`.
Prints each case's timings; raises on a wrong outcome.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx
import uvicorn

from kinference.gateway.server import QuietServer

CHUNKS, CHUNK_GAP_S = 20, 0.02


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    server: QuietServer = scope["app_server"]
    path = scope["path"]
    await send({"type": "http.response.start", "status": 200, "headers": []})
    if path == "/exit":  # exit from inside a request, twice
        server.exit()
        server.exit()
    n = CHUNKS if path.startswith("/stream") else 1
    gap = float(path.split("/")[-1]) if path.startswith("/stream/") else CHUNK_GAP_S
    for i in range(n):
        await send({"type": "http.response.body", "body": b"x%d\n" % i, "more_body": True})
        await asyncio.sleep(gap)
    await send({"type": "http.response.body", "body": b"end\n"})


class Bound:
    """`app` with its server in the scope."""

    def __init__(self) -> None:
        self.server: QuietServer | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await app({**scope, "app_server": self.server}, receive, send)


def made(grace: float | None = 5.0) -> tuple[QuietServer, socket.socket, str]:
    bound = Bound()
    config = uvicorn.Config(
        bound, lifespan="off", log_level="error", timeout_graceful_shutdown=grace
    )
    server = bound.server = QuietServer(config)
    sock = socket.create_server(("127.0.0.1", 0))
    return server, sock, f"http://127.0.0.1:{sock.getsockname()[1]}"


async def started(server: QuietServer, sock: socket.socket) -> asyncio.Task[None]:
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(0.005)
    return task


async def exit_before_serve() -> str:
    server, sock, _ = made()
    server.exit()
    t = time.perf_counter()
    await asyncio.wait_for(server.serve(sockets=[sock]), 10)
    return f"served and stopped in {time.perf_counter() - t:.3f} s"


async def exit_wakes_main_loop() -> str:
    server, sock, _ = made()
    task = await started(server, sock)
    await asyncio.sleep(0.05)
    ticks: list[float] = []
    on_tick = server.on_tick

    async def stamped(counter: int) -> bool:
        ticks.append(time.perf_counter())
        return await on_tick(counter)

    server.on_tick = stamped  # type: ignore[method-assign]
    await asyncio.sleep(0.15)  # at least one tick stamped
    t = time.perf_counter()
    server.exit()
    server.exit()  # twice
    await asyncio.wait_for(task, 10)
    last = max(ticks)
    return f"exit -> main loop ends {1000 * (last - t):.1f} ms; serve returned {time.perf_counter() - t:.3f} s"


async def exit_while_streaming(grace: float | None, gap: float) -> str:
    server, sock, url = made(grace)
    task = await started(server, sock)
    async with httpx.AsyncClient(timeout=30) as client:
        lines: list[str] = []
        t = time.perf_counter()
        try:
            async with client.stream("GET", f"{url}/stream/{gap}") as response:
                async for line in response.aiter_lines():
                    lines.append(line)
                    if len(lines) == 2:
                        server.exit()
                        t = time.perf_counter()
        except httpx.HTTPError:  # cut at the grace
            pass
        whole = lines[-1:] == ["end"]
        refused = False
        try:
            await client.get(f"{url}/one", timeout=2)
        except httpx.HTTPError:
            refused = True
    await asyncio.wait_for(task, 30)
    return f"stream whole {whole} ({len(lines)} lines), new connection refused {refused}, drained {time.perf_counter() - t:.2f} s"


async def exit_from_a_request() -> str:
    server, sock, url = made()
    task = await started(server, sock)
    async with httpx.AsyncClient(timeout=30) as client:
        body = (await client.get(f"{url}/exit")).text
    await asyncio.wait_for(task, 10)
    return f"answered {body.split()[-1]!r}, serve returned once"


async def main() -> None:
    for name, case in [
        ("exit before serve", exit_before_serve),
        ("exit wakes main loop (twice)", exit_wakes_main_loop),
        ("exit inside a request (twice)", exit_from_a_request),
        ("exit while streaming (grace 5 s)", lambda: exit_while_streaming(5.0, CHUNK_GAP_S)),
        ("exit, stream longer than grace 0.3 s", lambda: exit_while_streaming(0.3, 0.1)),
    ]:
        outcome = await case()
        print(f"  {name}: {outcome}")
        if "streaming" in name:
            assert outcome.startswith("stream whole True") and "refused True" in outcome
        if "grace 0.3" in name:
            assert outcome.startswith("stream whole False") and "refused True" in outcome


if __name__ == "__main__":
    runners: list[tuple[str, Callable[[Any], Any]]] = [("asyncio", asyncio.run)]
    if "--no-uvloop" not in sys.argv:
        import uvloop

        runners.append(("uvloop", uvloop.run))
    for label, run in runners:
        print(label)
        run(main())
