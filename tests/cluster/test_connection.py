"""KINFERENCE_REDIS_URL forms, against real redis-server processes where one can run here."""

from __future__ import annotations

from pathlib import Path

import pytest

from kinference.cluster.connection import RedisUrlError, check_url, connect
from loadtest.redis_server import RedisServer


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/0",
        "rediss://user:pw@redis.example:6380/1",
        "unix:///var/run/redis.sock?db=2",
        "redis+sentinel://s1:26379,s2:26379/mymaster",
        "redis+sentinel://user:pw@s1:26379/mymaster/3",
        "redis+cluster://node1:7000",
    ],
)
def test_supported_urls_are_accepted(url: str) -> None:
    assert check_url(url) == url


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://127.0.0.1:6379", "scheme"),
        ("127.0.0.1:6379", "scheme"),
        ("redis+sentinel://s1:26379", "service name"),
        ("redis+sentinel://s1/mymaster", "host:port"),
    ],
)
def test_unusable_urls_are_refused_with_the_reason(url: str, message: str) -> None:
    with pytest.raises(RedisUrlError, match=message):
        check_url(url)


async def test_password_and_acl_user_from_the_url() -> None:
    server = RedisServer(extra_args=("--requirepass", "s3cret")).start()
    try:
        server.cli("ACL", "SETUSER", "picker", "on", ">pickerpw", "~*", "+@all")
        for url in (
            f"redis://:s3cret@127.0.0.1:{server.port}/0",
            f"redis://picker:pickerpw@127.0.0.1:{server.port}/0",
        ):
            client = connect(url)
            assert await client.ping()
            await client.aclose()
        refused = connect(f"redis://picker:wrong@127.0.0.1:{server.port}/0")
        with pytest.raises(Exception, match=r"(?i)auth|password|WRONGPASS"):
            await refused.ping()
        await refused.aclose()
    finally:
        server.stop()


async def test_unix_socket(tmp_path: Path) -> None:
    path = str(tmp_path / "redis.sock")
    server = RedisServer(extra_args=("--unixsocket", path)).start()
    try:
        client = connect(f"unix://{path}?db=0")
        assert await client.ping()
        await client.aclose()
    finally:
        server.stop()
