"""The routing benchmark with Dynamo's per-request `nvext` asked for (h170, diagnostic).

    python docs/h170/nvext_run.py SIDE.jsonl <bench_routing arguments>

Every request body gets `"nvext": {"extra_fields": ["worker_id", "timing"]}`, so the Dynamo
frontend that serves it (Dynamo's KV router, or the per-mocker round-robin frontend behind
kinference) names the mocker that ran it and its own timing (received, TTFT). One JSON line
per request goes to SIDE.jsonl: response id, the client's wall-clock send time, the nvext.
Join to `--requests` lines by `response_id`. With `H170_GATEWAY_LOGS=DIR`, kinference's
gateways log at DEBUG in JSON (each first token with the chosen endpoint and the predicted
TTFT) into DIR, kept after the run.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from loadtest.routing_bench import drivers, main, replay, replicas, stream

NVEXT = {"extra_fields": ["worker_id", "timing"]}


def _patch(side: list[dict[str, Any]]) -> None:
    plain_body = replay.request_body
    plain_event = stream._on_event
    plain_stream = drivers.stream_chat

    def body(turn: Any, replies: list[str]) -> bytes:
        request = json.loads(plain_body(turn, replies))
        request["nvext"] = NVEXT
        return json.dumps(request, separators=(",", ":")).encode()

    def on_event(result: Any, event: dict[str, Any], now: float, last: float) -> float:
        if isinstance(event.get("nvext"), dict):
            result.__dict__.setdefault("nvext", {}).update(event["nvext"])
        return plain_event(result, event, now, last)

    async def stream_chat(*args: Any, **kwargs: Any) -> Any:
        sent = time.time()
        result = await plain_stream(*args, **kwargs)
        side.append(
            {"response_id": result.response_id, "sent_unix": sent, "url": args[1],
             "nvext": result.__dict__.get("nvext", {})}
        )  # fmt: skip
        return result

    replay.request_body = body
    stream._on_event = on_event
    drivers.stream_chat = stream_chat


def _keep_gateway_logs(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for key in ("KINFERENCE_LOG_LEVEL", "KINFERENCE_GATEWAY_LOG_LEVEL"):
        replicas.REPLICA_ENV[key] = "DEBUG"
    for key in ("KINFERENCE_LOG_FORMAT", "KINFERENCE_GATEWAY_LOG_FORMAT"):
        replicas.REPLICA_ENV[key] = "json"
    plain_spawn = replicas.spawn
    replicas.spawn = lambda spec, log_dir: plain_spawn(spec, folder)


def run() -> int:
    side_path, argv = sys.argv[1], sys.argv[2:]
    side: list[dict[str, Any]] = []
    _patch(side)
    if os.environ.get("H170_GATEWAY_LOGS"):
        _keep_gateway_logs(Path(os.environ["H170_GATEWAY_LOGS"]))
    try:
        return main.main(argv)
    finally:
        with open(side_path, "w") as out:
            out.writelines(json.dumps(line) + "\n" for line in side)


if __name__ == "__main__":
    sys.exit(run())
