"""Redis clients from KINFERENCE_REDIS_URL: plain, TLS, unix socket, Sentinel or Cluster.

URL forms (credentials and ACL user in the URL, as redis-py reads them):
  redis://[user:password@]host:port/db          rediss://… (TLS)       unix:///path?db=0
  redis+sentinel://[user:password@]host:port[,host:port…]/service_name[/db]
  redis+cluster://[user:password@]host:port      (any node; the rest are discovered)
Timeouts are short on purpose: a slow Redis must cost a background task a retry, never a Pick.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff

SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
SUPPORTED_SCHEMES = ("redis", "rediss", "unix", *SENTINEL_SCHEMES, *CLUSTER_SCHEMES)

# redis-py types replies as unions that depend on `decode_responses`; this client never
# decodes (keys and values are bytes) and every caller converts replies explicitly, so the
# client is typed loosely rather than with casts at every call.
RedisClient = Any


def wrong_type(error: BaseException) -> bool:
    """A command refused on a key of another type (WRONGTYPE: a key set by hand, or by a
    tool sharing the prefix; a script's call says so in its text too). Such a key is no
    entry of ours, not Redis unavailable: failing on it, a loop would fail for as long as
    the key lives."""
    return "WRONGTYPE" in str(error)


def check_replies(replies: Sequence[Any]) -> Sequence[Any]:
    """A pipeline's replies (run with `raise_on_error=False`), raising the first error that
    is not a key of another type (`wrong_type`: the caller reads those as no entry)."""
    for reply in replies:
        if isinstance(reply, Exception) and not wrong_type(reply):
            raise reply
    return replies


class RedisUrlError(ValueError):
    """KINFERENCE_REDIS_URL cannot be used."""


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds a command or a connection attempt may take before it counts as failed."""

    connect_s: float = 0.5
    command_s: float = 0.5


@dataclass(frozen=True, slots=True)
class RedisTls:
    """PEM files for TLS connections (rediss://): the CA that signed the server's
    certificate (else the system's), and a client certificate and key for Redis servers
    that require one (`tls-auth-clients yes`, the Redis default)."""

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None

    def options(self) -> dict[str, str]:
        """redis-py's keyword arguments for these files."""
        given = {
            "ssl_ca_certs": self.ca_file,
            "ssl_certfile": self.cert_file,
            "ssl_keyfile": self.key_file,
        }
        return {name: str(path) for name, path in given.items() if path is not None}


def check_url(url: str) -> str:
    """Validate the URL's form (not its reachability); returns it unchanged."""
    scheme = urlsplit(url).scheme
    if scheme not in SUPPORTED_SCHEMES:
        raise RedisUrlError(
            f"expected a URL with scheme {', '.join(SUPPORTED_SCHEMES)}, got {scheme or 'none'!r}"
        )
    if scheme in SENTINEL_SCHEMES:
        _sentinel_parts(url)
    return url


def connect(
    url: str, timeouts: Timeouts = Timeouts(), *, block_s: float = 0.0, tls: RedisTls = RedisTls()
) -> RedisClient:
    """A client (connections open lazily). `block_s` extends the command timeout for
    a client that issues blocking reads (XREAD BLOCK); `tls` applies to rediss:// URLs."""
    check_url(url)
    options: dict[str, Any] = {
        "socket_connect_timeout": timeouts.connect_s,
        "socket_timeout": timeouts.command_s + block_s,
        "health_check_interval": 0,
        # No retries inside redis-py: the background loops retry with backoff and jitter
        # (tenacity) and mark the shared view stale meanwhile.
        "retry": Retry(NoBackoff(), 0),
    }
    scheme = urlsplit(url).scheme
    if scheme.startswith("rediss"):
        options.update(tls.options())
    if scheme in CLUSTER_SCHEMES:
        plain = url.replace("+cluster", "", 1)
        return RedisCluster.from_url(plain, **options)
    if scheme in SENTINEL_SCHEMES:
        return _sentinel_master(url, options)
    return Redis.from_url(url, **options)


def _sentinel_parts(url: str) -> tuple[list[tuple[str, int]], str, int, str | None, str | None]:
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    nodes = []
    for item in netloc.split(","):
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise RedisUrlError(f"expected sentinel nodes as host:port[,host:port], got {netloc!r}")
        nodes.append((host.strip("[]"), int(port)))
    path = [piece for piece in parts.path.split("/") if piece]
    if not path:
        raise RedisUrlError("expected the Sentinel service name as the URL path")
    db = int(path[1]) if len(path) > 1 and path[1].isdigit() else 0
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password else None
    return nodes, path[0], db, user, password


class _SentinelMaster(Redis):
    """The master's client; closing it also closes the connections to the Sentinels."""

    watched_by: Sentinel  # not `sentinel`: that name is the SENTINEL command's method

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        for node in self.watched_by.sentinels:
            await node.aclose()


def _sentinel_master(url: str, options: dict[str, Any]) -> RedisClient:
    nodes, service, db, user, password = _sentinel_parts(url)
    tls = urlsplit(url).scheme.startswith("rediss")
    auth = {"username": user, "password": password}
    # Typed from redis-py 8 on, untyped before: called through Any so that both check.
    make_sentinel: Any = Sentinel
    sentinel: Sentinel = make_sentinel(
        nodes,
        sentinel_kwargs={**options, "ssl": tls, **auth},
        ssl=tls,
        **options,
        **auth,
    )
    master = sentinel.master_for(service, redis_class=_SentinelMaster, db=db)
    master.watched_by = sentinel
    return master
