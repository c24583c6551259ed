"""A pool's `prefix:` block: how its workers' prefix caches are known.

`approximate` (the default) predicts each worker's cache from what was routed to it (the
shared prefix index, no tokenizer, any engine). `precise` reads the engines' own KV-cache
events (vLLM's `--kv-events-config`, SGLang, Dynamo's mocker: ZMQ PUB, msgpack batches) and
tokenizes prompts the way the engine does, so it needs where each endpoint publishes, the
model's `tokenizer.json`, the chat template the engine applies and its block size.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from pydantic import Field, PositiveFloat, model_validator

from kinference.config.fields import ItemError, PolicyModel

PrefixMode = Literal["approximate", "precise"]
# The modules precise mode imports, all from the `kv-events` extra.
PRECISE_MODULES = ("zmq", "msgpack", "tokenizers", "jinja2")
# `{host}`, `{port}` and `{port+N}` / `{port-N}` are replaced per endpoint.
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_PORT_OFFSET = re.compile(r"port([+-]\d{1,5})?")
_SCHEMES = ("tcp://", "ipc://")
MAX_BLOCK_SIZE = 1024  # tokens; engines use 16 to 256
MAX_PORT = 65535


class PrefixConfig(PolicyModel):
    """The `prefix:` block of a pool."""

    mode: PrefixMode = "approximate"
    # ZMQ address each endpoint publishes its KV events on, e.g. `tcp://{host}:5557`.
    events: str | None = None
    # The engine's replay (ROUTER) address, e.g. `tcp://{host}:5558`; optional.
    replay: str | None = None
    topic: str = ""  # ZMQ topic the engine publishes under (vLLM's default is empty)
    tokenizer: str | None = None  # path of the model's tokenizer.json
    # Path of the chat template: a Jinja file, or a tokenizer_config.json holding one.
    chat_template: str | None = None
    block_size: int = Field(default=16, ge=1, le=MAX_BLOCK_SIZE)  # tokens per KV block
    # A worker picked for a request that has published nothing this long since is stalled.
    stall_after_s: PositiveFloat = 5.0
    # After a sequence gap with no replay, events count again after this long without one.
    resync_after_s: PositiveFloat = 10.0
    # A live batch applied this much later than it could have been (measured without
    # comparing clocks: `kvevents.trust`) makes the worker not precise until one is not.
    max_lag_s: PositiveFloat = 2.0

    @model_validator(mode="after")
    def _precise_needs(self) -> PrefixConfig:
        if self.mode == "approximate":
            return self
        missing = [m for m in PRECISE_MODULES if importlib.util.find_spec(m) is None]
        if missing:
            raise ItemError(
                "mode precise needs the kv-events extra (pip install 'kinference[kv-events]'); "
                f"missing: {', '.join(missing)}",
                "mode",
            )
        if self.events is None:
            raise ItemError("mode precise needs `events` (e.g. 'tcp://{host}:5557')", "events")
        if self.tokenizer is None:
            raise ItemError("mode precise needs `tokenizer` (a tokenizer.json path)", "tokenizer")
        for key in ("events", "replay"):
            check_address(getattr(self, key), key)
        for key in ("tokenizer", "chat_template"):
            path = getattr(self, key)
            if path is not None and not Path(path).is_file():
                raise ItemError(f"no such file {path!r}", key)
        return self


def check_address(pattern: str | None, key: str) -> None:
    if pattern is None:
        return
    if not pattern.startswith(_SCHEMES):
        raise ItemError(f"expected a tcp:// or ipc:// address, got {pattern!r}", key)
    for name in _PLACEHOLDER.findall(pattern):
        if name != "host" and not _PORT_OFFSET.fullmatch(name):
            raise ItemError(
                f"unknown placeholder {{{name}}} in {pattern!r} (use {{host}}, {{port}}, "
                "{port+N})",
                key,
            )


def check_ports(config: PrefixConfig, endpoints: Iterable[str]) -> None:
    """Every endpoint's `events` and `replay` address names a TCP port ZMQ can reach:
    a negative one fails at connect, and one past 65535 (or 0) is taken without ever
    connecting (`{port+N}` / `{port-N}` of an endpoint, or a literal port)."""
    for key in ("events", "replay"):
        pattern = getattr(config, key)
        if config.mode != "precise" or pattern is None or not pattern.startswith("tcp://"):
            continue
        for endpoint in endpoints:
            port = address_for(pattern, endpoint).rpartition(":")[2]
            if not re.fullmatch(r"-?\d+", port):
                raise ItemError(f"gives no port for endpoint {endpoint}", "prefix", key)
            if not 1 <= int(port) <= MAX_PORT:
                raise ItemError(f"gives port {int(port)} for endpoint {endpoint}", "prefix", key)


def address_for(pattern: str, endpoint: str) -> str:
    """`pattern` with `{host}`, `{port}` and `{port+N}` taken from `endpoint` (HOST:PORT)."""
    host, _, port_text = endpoint.rpartition(":")
    port = int(port_text)

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "host":
            return host
        offset = _PORT_OFFSET.fullmatch(name)
        assert offset is not None  # checked at validation
        return str(port + int(offset.group(1) or 0))

    return _PLACEHOLDER.sub(fill, pattern)
