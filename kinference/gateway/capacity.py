"""The most client connections the gateway holds at once, and the cheap refusal past it.

Every client connection holds a file descriptor and the gateway's memory for as long as the
client keeps it (idle keep-alive, a head sent slowly, a stream read slowly), and a
streaming one an upstream connection too. Without a bound, a crowd of idle or slow clients
exhausts the process's descriptors: accepts fail, and so do the upstream connects and the
picker's own sockets, for every request alike. As nginx's `worker_connections` and Envoy's
`global_downstream_max_connections` do, the gateway serves at most `limit` connections; one
past it is answered at once, before its request is read (no parser, no task, no timer of
uvicorn's): a 503 `too_many_connections` with `Retry-After: 1` and `connection: close`,
then a lingering close (kinference.gateway.refusals). SDKs retry a 503 after the delay.

uvicorn's `limit_concurrency` is not this: it answers 503 per request over the limit but
keeps the connection (the descriptors stay taken) and logs a warning per request. Here a
refusal is counted in a metric (`kinference_gateway_connections_refused_total`) and logged
at most once per `LOG_EVERY_S` with the count since the last line. At most `linger_max`
refused connections linger at once (answered, until the client closes or 2 s pass): the
descriptors the process has room for besides the served connections' (`linger_room`),
so that a burst of clients far past the cap all read their 503; past that, one is answered
and closed at once (its unread request may turn the close into a reset).

Every server has a cap: the limit is the gateway's setting, by default
`GatewaySettings.max_client_connections` (kinference.gateway.server).
"""

from __future__ import annotations

import logging
import resource
from collections.abc import Callable

from kinference.gateway.errors import GatewayError

log = logging.getLogger(__name__)

LOG_EVERY_S = 10.0  # at most one line about refusals this often
RETRY_AFTER_S = 1  # connections come and go within seconds
# Descriptors wanted per client connection (its own and, streaming, its upstream's; and a
# lingering refusal's), and besides them (the picker's sockets, idle upstream connections).
_FDS_PER_CONNECTION = 3
_FDS_SPARE = 1024
_LINGER_UNLIMITED = 1 << 20  # lingering refusals with no open-files limit at all


def refusal(limit: int) -> bytes:
    """The whole answer to a connection past `limit` (the path is unknown: OpenAI's shape)."""
    body = GatewayError(
        503,
        "too_many_connections",
        f"the gateway holds its most client connections ({limit}); retry shortly",
    ).body()
    return (
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\nretry-after: %d\r\nconnection: close\r\n\r\n%s"
        % (len(body), RETRY_AFTER_S, body)
    )


class ConnectionCap:
    """Client connections open (`open`), at most `limit`; refusals counted, logged sparingly.

    `on_refused` is called once per refused connection (the metric); at most `linger_max`
    refused connections linger (by default as many as `limit`)."""

    __slots__ = (
        "_closed_at_once",
        "_next_log",
        "_on_refused",
        "_unlogged",
        "answer",
        "limit",
        "linger_max",
        "open",
    )

    def __init__(
        self,
        limit: int,
        on_refused: Callable[[], None] | None = None,
        *,
        linger_max: int | None = None,
    ) -> None:
        self.limit = limit
        self.linger_max = limit if linger_max is None else linger_max
        self.open = 0  # connections admitted and not closed yet
        self.answer = refusal(limit)
        self._on_refused = on_refused
        self._unlogged = 0  # refusals since the last line
        self._closed_at_once = 0  # of them, past `linger_max`
        self._next_log = float("-inf")  # loop time from which a line may be logged

    @property
    def full(self) -> bool:
        """Whether a connection made now would be refused."""
        return self.open >= self.limit

    def admit(self) -> bool:
        """Whether a new connection is served (then counted open until `release`)."""
        if self.open < self.limit:
            self.open += 1
            return True
        return False

    def release(self) -> None:
        """An admitted connection closed."""
        self.open -= 1

    def refuse(self, now: float, *, lingering: int) -> bool:
        """Count a refused connection; True when it may linger answered (`lingering` are),
        False when it is to be closed at once."""
        if self._on_refused is not None:
            self._on_refused()
        lingers = lingering < self.linger_max
        self._unlogged += 1
        self._closed_at_once += not lingers
        if now >= self._next_log:
            log.warning(
                "client connections at the cap (%d, KINFERENCE_GATEWAY_MAX_CLIENT_CONNECTIONS):"
                " %d refused since the last line (%d closed at once, past %d lingering)",
                self.limit,
                self._unlogged,
                self._closed_at_once,
                self.linger_max,
            )
            self._unlogged = self._closed_at_once = 0
            self._next_log = now + LOG_EVERY_S
        return lingers


def fit_open_files(limit: int) -> int:
    """Raise the process's soft limit of open files towards what `limit` connections want
    (as Go's runtime raises it to the hard limit); one warning when the hard limit is
    lower. Returns the soft limit in force."""
    wanted = limit * _FDS_PER_CONNECTION + _FDS_SPARE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < wanted:
        log.warning(
            "open files limited to %d: %d client connections "
            "(KINFERENCE_GATEWAY_MAX_CLIENT_CONNECTIONS) may want up to %d; "
            "raise the limit (ulimit -n) or lower the setting",
            soft,
            limit,
            wanted,
        )
    return soft


def linger_room(limit: int, open_files: int) -> int:
    """How many refused connections may linger with `open_files` descriptors (the soft
    limit `fit_open_files` returned; -1 for none): those the served connections (their own
    and their upstream's) and the spare do not want, and at least `limit`."""
    if open_files == resource.RLIM_INFINITY:
        return _LINGER_UNLIMITED
    return max(limit, open_files - limit * (_FDS_PER_CONNECTION - 1) - _FDS_SPARE)
