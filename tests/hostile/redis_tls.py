"""A real redis-server that speaks only TLS (client certificates required) and knows only
the ACL users of docs/security.md, plus an administrator for the tests' own checks."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path
from typing import Any

import redis

from loadtest.redis_server import RedisServer, redis_server_binary
from tests.hostile.certs import Authority, Issued

ADMIN = ("admin", "admin-secret")
PICKER = ("kinference-picker", "picker-secret")
READER = ("kinference-reader", "reader-secret")

# The two ACLs of docs/security.md, verbatim (tests/hostile/test_security_docs.py checks that).
PICKER_ACL = (
    "on #{password} resetkeys ~{{kinference}}:* ~{{kinference:* resetchannels -@all "
    "+ping +info "
    "+get +set +del +exists +expire +pexpire +pttl "
    "+hget +hset +hdel +hgetall +hincrby "
    "+sadd +srem +smembers +scard +spop +zadd +zrem +zrangebyscore +zremrangebyscore +time +scan "
    "+xadd +xread +xrange +xrevrange "
    "+multi +exec +discard +eval +evalsha +script|load"
)
READER_ACL = (
    "on #{password} resetkeys ~{{kinference}}:* ~{{kinference:* resetchannels -@all +@read +ping"
)


def tls_supported() -> bool:
    """Whether the installed redis-server was built with TLS (`--tls-port` is then known)."""
    probe = subprocess.run(
        [redis_server_binary(), "--port", "0", "--tls-port", "1", "--tls-cert-file", "/"],
        capture_output=True,
        timeout=10,
        check=False,
    )
    text = (probe.stdout + probe.stderr).decode(errors="replace")
    # Built with TLS, it gets as far as loading the (bogus) certificate and fails there.
    return "Failed to configure TLS" in text or "tls-ca-cert" in text


def _sha256(password: str) -> str:
    import hashlib

    return hashlib.sha256(password.encode()).hexdigest()


class TlsRedisServer(RedisServer):
    """redis-server on a TLS port only (`--port 0`), client certificates required."""

    def __init__(self, ca: Authority) -> None:
        super().__init__()
        self.ca = ca
        self.server_cert = ca.issue("redis-server")
        self.client_cert = ca.issue("redis-client", client=True)
        acl = Path(self.directory) / "users.acl"
        acl.write_text(
            "user default off\n"
            f"user {ADMIN[0]} on #{_sha256(ADMIN[1])} ~* &* +@all\n"
            f"user {PICKER[0]} {PICKER_ACL.format(password=_sha256(PICKER[1]))}\n"
            f"user {READER[0]} {READER_ACL.format(password=_sha256(READER[1]))}\n"
        )
        self.command = [
            redis_server_binary(),
            "--port", "0",
            "--tls-port", str(self.port),
            "--bind", "127.0.0.1",
            "--tls-cert-file", str(self.server_cert.cert),
            "--tls-key-file", str(self.server_cert.key),
            "--tls-ca-cert-file", str(ca.cert),
            "--aclfile", str(acl),
            "--save", "",
            "--appendonly", "no",
            "--dir", self.directory,
        ]  # fmt: skip

    def url(self, user: tuple[str, str]) -> str:  # type: ignore[override]
        return f"rediss://{user[0]}:{user[1]}@127.0.0.1:{self.port}/0"

    def tls_settings(self, identity: Issued | None = None) -> dict[str, Any]:
        """The KINFERENCE_REDIS_TLS_* settings for a client with `identity`."""
        identity = identity or self.client_cert
        return {
            "redis_tls_ca_file": self.ca.cert,
            "redis_tls_cert_file": identity.cert,
            "redis_tls_key_file": identity.key,
        }

    def client(self, user: tuple[str, str] = ADMIN) -> redis.Redis:
        return redis.Redis(
            port=self.port,
            username=user[0],
            password=user[1],
            ssl=True,
            ssl_ca_certs=str(self.ca.cert),
            ssl_certfile=str(self.client_cert.cert),
            ssl_keyfile=str(self.client_cert.key),
            decode_responses=True,
            socket_timeout=5,
        )

    def ping(self) -> bool:
        try:
            with self.client() as client:
                return bool(client.ping())
        except (redis.RedisError, OSError, ssl.SSLError):
            return False

    def cli(self, *args: str) -> str:
        with self.client() as client:
            return str(client.execute_command(*args))
