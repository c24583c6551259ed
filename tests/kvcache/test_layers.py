"""The routing core and the precise caches it reads import no transport: ZMQ, msgpack and the
tokenizer live in kinference.kvevents / kinference.tokenize, loaded only by the app."""

from __future__ import annotations

import subprocess
import sys

TRANSPORTS = ("zmq", "msgpack", "tokenizers", "jinja2", "grpc")


def test_routing_and_kvcache_load_no_transport() -> None:
    code = (
        "import sys, kinference.routing, kinference.kvcache.precise, kinference.kvevents.trust\n"
        f"print(','.join(m for m in {TRANSPORTS!r} if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == ""
