"""`kinference gateway`: settings from env and flags, one-line errors, a real process."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from kinference.cli import main
from kinference.client import PickerClient
from kinference.gateway.settings import GatewaySettings, load_gateway_settings
from kinference.settings import SettingsError
from kinference.v1 import picker_pb2 as pb
from tests.conftest import RunningPicker
from tests.gateway.conftest import free_port

SECRET = "my card number is 4111 1111 1111 1111"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hide any KINFERENCE_* variables of the machine running the tests."""
    for name in list(os.environ):
        if name.upper().startswith("KINFERENCE_"):
            monkeypatch.delenv(name)


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("kinference gateway: error: ")
    return err


def test_defaults_env_and_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = GatewaySettings()
    assert (defaults.listen, defaults.picker) == ("0.0.0.0:8080", "")
    assert defaults.in_process  # no picker target: the gateway hosts the picker
    assert (defaults.tenant_header, defaults.qos_header) == (
        "x-kinference-tenant",
        "x-kinference-qos",
    )
    assert defaults.pool_ref is None and defaults.model_ids == ()
    monkeypatch.setenv("KINFERENCE_GATEWAY_TENANT_HEADER", "X-Tenant")
    monkeypatch.setenv("KINFERENCE_GATEWAY_LISTEN", "127.0.0.1:1")
    monkeypatch.setenv("KINFERENCE_GATEWAY_MODELS", "a, b,")
    settings = load_gateway_settings(
        {"listen": "[::1]:8081", "pool": "default/chat", "picker": None}
    )
    assert settings.listen == "[::1]:8081"  # the flag wins
    assert settings.tenant_header == "x-tenant"
    assert settings.model_ids == ("a", "b")
    assert settings.pool_ref == ("default", "chat")


@pytest.mark.parametrize(
    ("overrides", "variable"),
    [
        ({"listen": "nonsense"}, "KINFERENCE_GATEWAY_LISTEN"),
        ({"qos_header": "x qos"}, "KINFERENCE_GATEWAY_QOS_HEADER"),
        ({"pool": "chat"}, "KINFERENCE_GATEWAY_POOL"),
        ({"read_timeout_s": 0}, "KINFERENCE_GATEWAY_READ_TIMEOUT_S"),
    ],
)
def test_bad_settings(overrides: dict[str, object], variable: str) -> None:
    with pytest.raises(SettingsError, match=variable):
        load_gateway_settings(overrides)


def test_bad_flag_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gateway", "--listen", "nonsense"]) == 2
    assert "KINFERENCE_GATEWAY_LISTEN" in one_line_error(capsys)


def test_bad_backends_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "b.yaml"
    path.write_text("backends:\n  nope: {base_url: 'http://a'}\n")
    assert main(["gateway", "--backends", str(path)]) == 2
    assert "NAMESPACE/NAME" in one_line_error(capsys)


def test_missing_extra_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for module in ("kinference.gateway.app", "kinference.gateway.server"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    for module in list(sys.modules):  # imports of these fail as if they were not installed
        if module.split(".")[0] in ("httptools", "uvicorn"):
            monkeypatch.setitem(sys.modules, module, None)
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    assert main(["gateway"]) == 2
    err = one_line_error(capsys)
    assert "uvicorn" in err and "kinference[gateway]" in err


async def test_real_process_serves_and_stops_on_sigterm(picker: RunningPicker) -> None:
    port = free_port()
    argv = ["--listen", f"127.0.0.1:{port}"]
    async with gateway_process(argv, KINFERENCE_GATEWAY_PICKER=picker.target) as process:
        async with httpx.AsyncClient(trust_env=False, timeout=2) as http:
            await _wait_healthy(http, process, f"http://127.0.0.1:{port}/healthz")
        assert b"kinference gateway on 127.0.0.1" in await stopped(process)


async def test_real_process_in_process_mode(tmp_path: Path) -> None:
    """Without a picker target the gateway hosts the picker, whose gRPC service it serves too."""
    port, grpc_port = free_port(), free_port()
    argv = ["--listen", f"127.0.0.1:{port}", "--grpc-listen", f"127.0.0.1:{grpc_port}"]
    async with gateway_process(argv, KINFERENCE_METRICS_LISTEN="") as process:
        async with httpx.AsyncClient(trust_env=False, timeout=2) as http:
            await _wait_healthy(http, process, f"http://127.0.0.1:{port}/health")
            models = (await http.get(f"http://127.0.0.1:{port}/v1/models")).json()
            assert models["object"] == "list" and models["data"]  # the built-in policy's
            secret = {
                "model": "nobody-serves-this",
                "messages": [{"role": "user", "content": SECRET}],
            }
            asked = await http.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=secret)
            assert asked.status_code >= 400
        async with PickerClient(f"127.0.0.1:{grpc_port}") as client:  # other callers
            pushed = await client.push([b'{"model": "m", "messages": []}'])
            pick = await client.pick(pushed.stream_id)  # no such model: nothing is held
            assert pick.outcome == pb.PickResponse.NO_WORKERS
        err = await stopped(process)
        assert b"picker in-process" in err
        # At the default level (INFO) each request leaves one access line: path and status,
        # never the body (it holds the user's prompt).
        access = f'"POST /v1/chat/completions HTTP/1.1" {asked.status_code}'.encode()
        assert err.count(access) == 1, err.decode()
        assert SECRET.encode() not in err


@contextlib.asynccontextmanager
async def gateway_process(argv: list[str], **env: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """`kinference gateway ARGV` in a process of its own, with `env` and no other
    KINFERENCE_* variable; killed on the way out unless it stopped."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("KINFERENCE_")} | env
    process = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "kinference", "gateway", *argv],
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.communicate()


async def stopped(process: asyncio.subprocess.Process) -> bytes:
    """SIGTERM; the process's stderr once it exited 0."""
    process.send_signal(signal.SIGTERM)
    async with asyncio.timeout(15):
        _out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return err


async def _wait_healthy(
    http: httpx.AsyncClient, process: asyncio.subprocess.Process, url: str
) -> None:
    """Until `url` answers 200; fails if the process exits or 30 s pass first."""
    deadline = time.monotonic() + 30
    while not await _healthy(http, url):
        assert process.returncode is None, "the gateway exited while starting"
        assert time.monotonic() < deadline, "the gateway never became healthy"
        await asyncio.sleep(0.05)


async def _healthy(http: httpx.AsyncClient, url: str) -> bool:
    try:
        return (await http.get(url)).status_code == 200
    except httpx.TransportError:
        return False
