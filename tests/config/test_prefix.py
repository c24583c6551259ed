"""A pool's `prefix:` block: defaults, what precise mode needs, and address patterns."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kinference.config import address_for, parse_policy
from tests.config.helpers import policy_error

POOL = "pools:\n  - name: a\n    endpoints: ['10.0.0.1:8000']\n    models: [m]\n    prefix:\n"


def precise(tokenizer_path: Path, **extra: str) -> str:
    lines = {"mode": "precise", "events": "'tcp://{host}:5557'", "tokenizer": str(tokenizer_path)}
    lines.update(extra)
    return POOL + "".join(f"      {key}: {value}\n" for key, value in lines.items())


@pytest.fixture
def tokenizer(tmp_path: Path) -> Path:
    path = tmp_path / "tokenizer.json"
    path.write_text("{}")
    return path


def test_default_is_approximate() -> None:
    pool = parse_policy("pools:\n  - {name: a, endpoints: [], models: [m]}\n").pools[0]
    assert pool.prefix.mode == "approximate" and pool.prefix.block_size == 16


def test_precise_pool(tokenizer: Path) -> None:
    pool = parse_policy(precise(tokenizer, replay="'tcp://{host}:{port+1}'", topic="kv")).pools[0]
    assert (pool.prefix.mode, pool.prefix.topic) == ("precise", "kv")
    assert address_for(pool.prefix.events or "", pool.endpoints[0]) == "tcp://10.0.0.1:5557"
    assert address_for(pool.prefix.replay or "", pool.endpoints[0]) == "tcp://10.0.0.1:8001"
    assert address_for("tcp://{host}:{port-7000}", "[::1]:8000") == "tcp://[::1]:1000"


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        ({"events": "null"}, "prefix.events: mode precise needs `events`"),
        ({"tokenizer": "null"}, "prefix.tokenizer: mode precise needs `tokenizer`"),
        ({"tokenizer": "/no/such/tokenizer.json"}, "prefix.tokenizer: no such file"),
        ({"chat_template": "/no/such.jinja"}, "prefix.chat_template: no such file"),
        ({"events": "'http://x:1'"}, "prefix.events: expected a tcp:// or ipc:// address"),
        ({"events": "'tcp://{pod}:1'"}, "prefix.events: unknown placeholder {pod}"),
        ({"replay": "'tcp://{host}:{port*2}'"}, "prefix.replay: unknown placeholder"),
        ({"block_size": "0"}, "prefix.block_size: Input should be greater than or equal to 1"),
        ({"block_size": "4096"}, "prefix.block_size: Input should be less than or equal"),
        ({"stall_after_s": "0"}, "prefix.stall_after_s: Input should be greater than 0"),
        ({"max_lag_s": "-1"}, "prefix.max_lag_s: Input should be greater than 0"),
        ({"mode": "exact"}, "prefix.mode: Input should be 'approximate' or 'precise'"),
        ({"events_at": "x"}, "prefix.events_at: unknown key"),
    ],
)
def test_invalid_prefix_blocks(tokenizer: Path, extra: dict[str, str], problem: str) -> None:
    assert problem in policy_error(precise(tokenizer, **extra))


def test_precise_needs_the_extra(tokenizer: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def without_zmq(name: str, *args: object) -> object:
        return None if name == "zmq" else real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", without_zmq)
    message = policy_error(precise(tokenizer))
    assert "prefix.mode: mode precise needs the kv-events extra" in message
    assert "pip install 'kinference[kv-events]'" in message and "missing: zmq" in message


@pytest.mark.parametrize(
    ("key", "pattern", "port"),
    [
        ("events", "'tcp://{host}:{port-9000}'", -1000),
        ("replay", "'tcp://{host}:{port+60000}'", 68000),
        ("events", "'tcp://{host}:{port-8000}'", 0),
    ],
)
def test_an_address_pattern_that_gives_an_endpoint_no_port_is_refused(
    tokenizer: Path, key: str, pattern: str, port: int
) -> None:
    """`{port+N}` / `{port-N}` must land in 1..65535 for every endpoint of the pool: ZMQ
    refuses a negative port at connect (the endpoint's feed died) and takes a port past
    65535 or 0 without ever connecting (its worker waited for events for ever)."""
    message = policy_error(precise(tokenizer, **{key: pattern}))
    assert f"prefix.{key}: gives port {port} for endpoint 10.0.0.1:8000" in message
