"""Serving the gateway with uvicorn on a socket we bind, so port 0 reports its real port.

Every server is bounded alike, however it is built (`kinference gateway`, a test, an
embedding program): its client timeout and connection cap are the gateway app's settings
(`GatewayApp.settings`), or for any other ASGI app the settings' defaults; they have one
home, `kinference.gateway.settings.GatewaySettings`.
"""

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

from kinference.gateway.app import GatewayApp
from kinference.gateway.capacity import ConnectionCap, fit_open_files, linger_room
from kinference.gateway.guard import GuardedProtocol
from kinference.gateway.refusals import Refusals
from kinference.gateway.settings import GatewaySettings
from kinference.heap import idle_blocks_returned, start_serving
from kinference.settings import split_host_port

_READY_POLL_S = 0.01  # how often start() checks whether uvicorn has finished starting
_TICK_S = 0.1  # uvicorn's main-loop tick (its date header is refreshed every tenth)


def bind(listen: str) -> socket.socket:
    """A listening TCP socket on `HOST:PORT` (IPv6 in brackets); port 0 = any free."""
    host, port = split_host_port(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family)


class QuietServer(uvicorn.Server):
    """uvicorn leaving signal handlers alone: its owner decides when it stops (uvicorn's own
    handling would re-raise SIGTERM after the drain, so the process never exits 0), with
    `exit()`; its main loop wakes for it at once, where uvicorn's would notice
    `should_exit` at its next 0.1 s tick."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._exiting = asyncio.Event()

    def exit(self) -> None:
        """Begin the drain now (uvicorn's shutdown: stop accepting, finish what is under way)."""
        self.should_exit = True
        self._exiting.set()

    async def main_loop(self) -> None:
        counter = 0
        while not await self.on_tick(counter):  # the date header, limits, should_exit
            counter = (counter + 1) % 864_000
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_TICK_S):
                    await self._exiting.wait()

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
    ) -> None:
        """The client timeout (kinference.gateway.guard) and the most client connections
        served at once (kinference.gateway.capacity) are `app.settings`' for a GatewayApp,
        the settings' defaults for any other app."""
        settings = (
            app.settings if isinstance(app, GatewayApp) else GatewaySettings.model_construct()
        )
        limit = settings.max_client_connections
        linger_max = linger_room(limit, fit_open_files(limit))
        self.cap = (
            app.metrics.connection_cap(limit, linger_max=linger_max)
            if isinstance(app, GatewayApp)
            else ConnectionCap(limit, linger_max=linger_max)
        )
        self.refusals = Refusals(self.cap)
        self._sock = bind(listen)
        self.port: int = self._sock.getsockname()[1]
        # uvicorn's httptools protocol, heads joined to bodies, clients bounded.
        guarded = functools.partial(
            GuardedProtocol, client_timeout_s=settings.client_timeout_s, refusals=self.refusals
        )
        cap, refusals = self.cap, self.refusals

        def protocol(**kwargs: Any) -> asyncio.Protocol:
            """A connection's protocol: a refused one's when the cap is full as it is accepted
            (the common refusal; one refused as it is made switches over)."""
            return refusals.protocol() if cap.full else guarded(**kwargs)

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
        self.server = QuietServer(config)
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
        async with idle_blocks_returned():
            await self._task

    def _exit(self) -> None:
        self.server.exit()

    async def _serve(self) -> None:
        try:
            await self.server.serve(sockets=[self._sock])
        finally:
            self._sock.close()
            self.refusals.close_all()

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
        self.server.exit()
        if self._task is not None:
            await self._task
            self._task = None
