"""Simulated engines served over HTTP by uvicorn on the caller's event loop.

`SimEngine` is one engine on one port; `SimEngines` runs several at once (each its own
prefix cache, scheduler and seed) for benchmarks that need a fleet in one process.
"""

from __future__ import annotations

import asyncio
import socket
import zlib
from collections.abc import Iterator
from types import TracebackType

import uvicorn

from kinference.gateway.server import QuietServer
from loadtest.sim_engine.config import SimEngineConfig
from loadtest.sim_engine.service import EngineService

# When an engine stops, responses under way get this long to finish, then are cancelled.
STOP_GRACE_S = 1
_READY_POLL_S = 0.002  # uvicorn says it is serving only through a flag


def engine_seed(seed: int, index: int) -> int:
    """The seed of engine `index` of a fleet started from `seed`: distinct, reproducible."""
    return zlib.crc32(f"{seed}/{index}".encode())


class SimEngine:
    """One simulated OpenAI-compatible engine. `await start()`, then use `url`."""

    def __init__(self, config: SimEngineConfig) -> None:
        self.config = config
        self.url = ""
        self.port = 0
        self._service: EngineService | None = None
        self._server: QuietServer | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def service(self) -> EngineService:
        if self._service is None:
            raise RuntimeError("the engine has not been started")
        return self._service

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Listen on host:port (0: any free port) and serve; returns the bound port."""
        if self._task is not None:
            raise RuntimeError("the engine is already started")
        self._service = EngineService(self.config)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server((host, port), family=family)  # binding errors raise here
        config = uvicorn.Config(
            self._service.app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=STOP_GRACE_S,
        )
        self._server = QuietServer(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                sock.close()
                self._task.result()  # raises what stopped it
                raise RuntimeError("the engine's server stopped while starting")
            await asyncio.sleep(_READY_POLL_S)
        self.port = sock.getsockname()[1]
        shown = f"[{host}]" if family == socket.AF_INET6 else host
        self.url = f"http://{shown}:{self.port}"
        return self.port

    async def stop(self) -> None:
        """Stop serving; responses under way get `STOP_GRACE_S` to finish."""
        if self._server is None or self._task is None:
            return
        self._server.exit()
        await self._task
        self._server = self._task = None

    def stats(self) -> dict[str, int]:
        """Totals so far: requests (scheduled), finished, prompt, cached and completion
        tokens; and now: running and waiting requests."""
        return self.service.stats()

    async def __aenter__(self) -> SimEngine:
        if self._task is None:
            await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()


class SimEngines:
    """`n` engines on one event loop: `async with SimEngines(8, config) as engines:`.

    Engine i has seed `engine_seed(config.seed, i)`. With `port` > 0 they listen on
    port, port + 1, ...; with 0, on any free ports.
    """

    def __init__(
        self, n: int, config: SimEngineConfig, *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        if n < 1:
            raise ValueError("n must be >= 1")
        self._host = host
        self._port = port
        self.engines = [SimEngine(config.with_seed(engine_seed(config.seed, i))) for i in range(n)]

    @property
    def urls(self) -> list[str]:
        return [engine.url for engine in self.engines]

    def __getitem__(self, index: int) -> SimEngine:
        return self.engines[index]

    def __len__(self) -> int:
        return len(self.engines)

    def __iter__(self) -> Iterator[SimEngine]:
        return iter(self.engines)

    async def start(self) -> None:
        try:
            for i, engine in enumerate(self.engines):
                await engine.start(self._host, self._port + i if self._port else 0)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        await asyncio.gather(*(engine.stop() for engine in self.engines))

    async def __aenter__(self) -> SimEngines:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
