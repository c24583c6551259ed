"""Structured logs: one JSON object per line, the request's id on its lines, never its body."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from grpc_health.v1 import health_pb2

from kinference.config import parse_policy
from kinference.ops.logs import JsonFormatter, TextFormatter, configure_logging, resolve_format
from tests.conftest import PickerFactory
from tests.ops.helpers import OPS_POLICY, exercise
from tests.test_cli import free_port, health_status

SECRET = "SECRET-MARKER-7f3a"
SERVING = health_pb2.HealthCheckResponse.SERVING


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """The root logger configured as `kinference serve` does (DEBUG, json) into a buffer;
    restored afterwards."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    buffer = io.StringIO()
    configure_logging("DEBUG", "json", buffer)
    yield buffer
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
    root.setLevel(level)


def record(msg: str = "pick %s", *args: object, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord("kinference.test", logging.INFO, __file__, 1, msg, args, None)
    made.__dict__.update(extra)
    return made


def test_json_line_has_the_standard_keys_then_the_extras() -> None:
    line = JsonFormatter().format(record("pick %s", "done", client_request_id="r-1", n=2))
    entry = json.loads(line)
    assert list(entry)[:4] == ["ts", "level", "logger", "msg"]
    assert entry["msg"] == "pick done" and entry["level"] == "INFO"
    assert entry["logger"] == "kinference.test"
    assert entry["client_request_id"] == "r-1" and entry["n"] == 2
    assert entry["ts"].endswith("Z") and "\n" not in line


def test_an_extra_never_hides_a_standard_key_and_odd_values_are_text() -> None:
    entry = json.loads(JsonFormatter().format(record("x", level="fake", path=object())))
    assert entry["level"] == "INFO"
    assert entry["path"].startswith("<object object")


def test_exceptions_stay_on_one_line() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        failed = logging.LogRecord("k", logging.ERROR, __file__, 1, "failed", (), None)
        failed.exc_info = sys.exc_info()
    line = JsonFormatter().format(failed)
    assert "\n" not in line
    assert "ValueError: boom" in json.loads(line)["exc"]


def test_text_lines_append_extras() -> None:
    line = TextFormatter().format(record("pick %s", "ok", client_request_id="r-1"))
    assert line.endswith(" INFO kinference.test pick ok client_request_id=r-1")


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_auto_is_text_on_a_terminal_and_json_elsewhere() -> None:
    assert resolve_format("auto", _Tty()) == "text"
    assert resolve_format("auto", io.StringIO()) == "json"
    assert resolve_format("json", _Tty()) == "json"


def test_configuring_twice_replaces_the_handler(captured: io.StringIO) -> None:
    configure_logging("INFO", "json", captured)
    logging.getLogger("kinference.test").info("once")
    assert captured.getvalue().count("once") == 1


async def test_request_lines_carry_the_request_id_and_never_the_body(
    captured: io.StringIO, start_picker: PickerFactory
) -> None:
    picker = await start_picker(parse_policy(OPS_POLICY))
    await exercise(picker, request_id="req-42", content=f"my password is {SECRET}")
    lines = [json.loads(line) for line in captured.getvalue().splitlines()]
    assert SECRET not in captured.getvalue()
    mine = [line for line in lines if line.get("client_request_id") == "req-42"]
    picks = [line for line in mine if line["msg"] == "pick"]
    assert len(picks) == 1
    assert picks[0]["outcome"] == "ok" and picks[0]["reason"] == "none"
    assert picks[0]["endpoint"] in {"10.0.0.1:8000", "10.0.0.2:8000"}
    assert picks[0]["response_id"] > 0
    (final,) = [line for line in mine if line["msg"] == "final report"]
    assert final["prompt_tokens"] == 40 and final["response_id"] == picks[0]["response_id"]
    unknown = [line for line in lines if line.get("reason") == "unknown_model"]
    assert unknown and unknown[0]["outcome"] == "no_workers"
    (abort,) = [line for line in lines if line["msg"] == "abort"]
    assert abort["abort_reason"] == "BACKEND_UNAUTHORIZED" and abort["level"] == "INFO"


def test_serve_writes_json_lines_to_a_pipe() -> None:
    """`kinference serve` configures logging from the settings: auto is json on a pipe."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("KINFERENCE_")}
    env.update(KINFERENCE_METRICS_LISTEN="", KINFERENCE_SHUTDOWN_GRACE_S="5")
    command = [sys.executable, "-m", "kinference", "serve", "--listen", f"127.0.0.1:{port}"]
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while health_status(f"127.0.0.1:{port}", timeout=1) != SERVING:
            assert process.poll() is None, process.communicate()[1].decode()
            assert time.monotonic() < deadline, "the server never became SERVING"
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    lines = [json.loads(line) for line in err.decode().splitlines()]
    messages = [line["msg"] for line in lines]
    assert any(msg.startswith("kinference listening") for msg in messages), messages
    assert any(msg.startswith("signal received: draining") for msg in messages), messages
    assert all({"ts", "level", "logger", "msg"} <= set(line) for line in lines)


def test_per_request_library_lines_are_quiet_but_their_warnings_pass(
    captured: io.StringIO,
) -> None:
    configure_logging("INFO", "json", captured)
    logging.getLogger("httpx").info('HTTP Request: GET http://10.0.0.5:8000/metrics "200 OK"')
    logging.getLogger("httpx").warning("connection pool full")
    lines = captured.getvalue().splitlines()
    assert [json.loads(line)["msg"] for line in lines] == ["connection pool full"]
