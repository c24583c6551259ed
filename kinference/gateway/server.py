"""Serving the gateway with uvicorn on a socket we bind, so port 0 reports its real port."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
import socket
from collections.abc import Callable, Iterator
from typing import Any, cast

import uvicorn
from uvicorn.lifespan.on import LifespanOn

from kinference.gateway.capacity import ConnectionCap
from kinference.gateway.guard import GuardedProtocol
from kinference.heap import start_serving
from kinference.settings import split_host_port

_READY_POLL_S = 0.01  # how often start() checks whether uvicorn has finished starting


def bind(listen: str) -> socket.socket:
    """A listening TCP socket on `HOST:PORT` (IPv6 in brackets); port 0 = any free."""
    host, port = split_host_port(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family)


class _QuietServer(uvicorn.Server):
    """uvicorn leaving signal handlers alone: its owner decides when it stops (uvicorn's own
    handling would re-raise SIGTERM after the drain, so the process never exits 0)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class _SettlingLifespan(LifespanOn):
    """uvicorn's lifespan, then `settled` once the app's startup completed: uvicorn starts
    accepting connections only after this returns (connections made meanwhile wait in the
    listening socket's backlog)."""

    def __init__(self, config: uvicorn.Config, settled: Callable[[], None]) -> None:
        super().__init__(config)
        self._settled = settled

    async def startup(self) -> None:
        await super().startup()
        if not self.should_exit:
            self._settled()


class GatewayServer:
    """uvicorn around the gateway app; `start` returns once it accepts connections."""

    def __init__(
        self,
        app: Any,
        listen: str,
        *,
        log_config: Any = None,
        grace_s: int | None = None,
        client_timeout_s: float | None = None,
        cap: ConnectionCap | None = None,
    ) -> None:
        """`client_timeout_s`: the gateway's setting (kinference.gateway.guard); None leaves
        clients unbounded in time. `cap`: the most client connections served at once
        (kinference.gateway.capacity); None leaves them unbounded."""
        self.cap = cap
        self._sock = bind(listen)
        self.port: int = self._sock.getsockname()[1]
        # uvicorn's httptools protocol, heads joined to bodies, clients bounded.
        protocol = functools.partial(GuardedProtocol, client_timeout_s=client_timeout_s, cap=cap)
        config = uvicorn.Config(
            app,
            lifespan="on",
            http=cast(Any, protocol),  # uvicorn takes a class; it only calls it
            # The gateway's own date header only; no server header (neither ours nor the
            # upstream's: kinference.gateway.upstream drops the relayed ones).
            server_header=False,
            log_config=log_config,
            access_log=log_config is not None,
            # Then responses still streaming are cancelled: each sends its Abort.
            timeout_graceful_shutdown=grace_s,
        )
        config.load()
        settling = functools.partial(_SettlingLifespan, settled=self._settle)
        config.lifespan_class = cast(Any, settling)  # uvicorn only calls it with the config
        self.server = _QuietServer(config)
        self._task: asyncio.Task[None] | None = None
        self._settled: Callable[[], None] | None = None

    async def serve_until_signalled(self) -> None:
        """Serve until SIGINT or SIGTERM, then drain (the command line)."""
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._exit)
        # The heap settings `kinference serve` has (kinference.heap): the in-process picker
        # starts in the lifespan, so its startup heap is frozen too, before uvicorn accepts.
        await start_serving(self.start)
        assert self._task is not None
        await self._task

    def _exit(self) -> None:
        self.server.should_exit = True

    async def _serve(self) -> None:
        try:
            await self.server.serve(sockets=[self._sock])
        finally:
            self._sock.close()

    def _settle(self) -> None:
        if self._settled is not None:
            self._settled()

    async def start(self, settled: Callable[[], None] | None = None) -> None:
        """Serve in a background task; raises if uvicorn stops before it is ready.
        `settled` (kinference.heap.start_serving's freeze) runs after the app's startup,
        before the first connection is accepted."""
        self._settled = settled
        self._task = asyncio.create_task(self._serve(), name="kinference-gateway")
        while not self.server.started:
            if self._task.done():
                await self._task
                raise RuntimeError("the gateway stopped while starting")
            await asyncio.sleep(_READY_POLL_S)

    async def stop(self) -> None:
        """Stop accepting, let responses under way finish, run the lifespan's shutdown."""
        self.server.should_exit = True
        if self._task is not None:
            await self._task
            self._task = None
