"""The command line: check-config, one-line errors with exit code 2, and a real serve."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kinference.cli import EXIT_USAGE, main

GOOD = """\
pools:
  - namespace: default
    name: chat
    endpoints: ["10.0.0.5:8000"]
    models: ["llama"]
"""
BAD = """\
pools:
  - namespace: default
    name: chat
    endpoints: ["10.0.0.5"]
    models: ["llama"]
"""


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hide any KINFERENCE_* variables of the machine running the tests."""
    for name in list(os.environ):
        if name.upper().startswith("KINFERENCE_"):
            monkeypatch.delenv(name)


@pytest.fixture
def good(tmp_path: Path) -> Path:
    path = tmp_path / "good.yaml"
    path.write_text(GOOD)
    return path


@pytest.fixture
def bad(tmp_path: Path) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    return path


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    assert out == ""
    assert err.endswith("\n")
    assert err.count("\n") == 1, err
    assert err.startswith("kinference: error: ")
    return err


def test_check_config_ok(good: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", str(good)]) == 0
    out, err = capsys.readouterr()
    assert out == f"{good}: ok (1 pool, 0 providers, 1 model, 0 tenant rules)\n"
    assert err == ""


def test_check_config_counts_pools(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("pools: []\n")
    assert main(["check-config", str(path)]) == 0
    expected = f"{path}: ok (0 pools, 0 providers, 0 models, 0 tenant rules)\n"
    assert capsys.readouterr().out == expected


def test_check_config_bad_file_names_the_line(
    bad: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check-config", str(bad)]) == EXIT_USAGE == 2
    err = one_line_error(capsys)
    assert f"{bad}:4: pools[0].endpoints[0]: expected HOST:PORT" in err


def test_check_config_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.yaml"
    assert main(["check-config", str(missing)]) == 2
    assert f"{missing}: cannot read" in one_line_error(capsys)


def test_check_config_invalid_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("pools:\n  - name: [chat\n")
    assert main(["check-config", str(path)]) == 2
    assert "invalid YAML" in one_line_error(capsys)


def test_serve_with_bad_config(bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--config", str(bad), "--listen", "127.0.0.1:0"]) == 2
    assert f"{bad}:4:" in one_line_error(capsys)


def test_serve_with_bad_config_from_env(
    bad: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KINFERENCE_CONFIG", str(bad))
    assert main(["serve"]) == 2
    assert f"{bad}:4:" in one_line_error(capsys)


def test_serve_with_bad_env_var(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KINFERENCE_MAX_BODY_BYTES", "abc")
    assert main(["serve"]) == 2
    err = one_line_error(capsys)
    assert "KINFERENCE_MAX_BODY_BYTES" in err
    assert "'abc'" in err


def test_serve_with_bad_listen_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--listen", "nonsense"]) == 2
    err = one_line_error(capsys)
    assert "'nonsense'" in err
    assert "LISTEN" in err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main([])
    assert caught.value.code == 2
    with pytest.raises(SystemExit) as caught:
        main(["serve", "--bogus"])
    assert caught.value.code == 2
    capsys.readouterr()


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--version"])
    assert caught.value.code == 0
    assert capsys.readouterr().out.startswith("kinference ")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def health_status(target: str, timeout: float) -> int | None:
    """The health of service "", waiting up to `timeout` for the server to answer."""
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service="")
        try:
            response = stub.Check(request, timeout=timeout, wait_for_ready=True)
        except grpc.RpcError:
            return None
        return int(response.status)


def test_serve_starts_on_the_built_in_policy_and_stops_on_sigterm() -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("KINFERENCE_")}
    env.update(KINFERENCE_METRICS_LISTEN="127.0.0.1:0", KINFERENCE_SHUTDOWN_GRACE_S="5")
    process = subprocess.Popen(
        [sys.executable, "-m", "kinference", "serve", "--listen", f"127.0.0.1:{port}"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        status = None
        while status != health_pb2.HealthCheckResponse.SERVING:
            assert process.poll() is None, process.communicate()[1].decode()
            assert time.monotonic() < deadline, "the server never became SERVING"
            status = health_status(f"127.0.0.1:{port}", timeout=1)
        process.send_signal(signal.SIGTERM)
        _out, err = process.communicate(timeout=5 + 10)
        assert process.returncode == 0, err.decode()
        assert b"built-in example policy" in err
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
