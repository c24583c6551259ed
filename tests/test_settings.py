"""Process settings: defaults, environment parsing, overrides and one-line errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from kinference.settings import (
    GiB,
    MiB,
    Settings,
    SettingsError,
    format_host_port,
    load_settings,
    split_host_port,
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hide any KINFERENCE_* variables of the machine running the tests."""
    for name in list(os.environ):
        if name.upper().startswith("KINFERENCE_"):
            monkeypatch.delenv(name)


def test_defaults() -> None:
    settings = load_settings()
    assert settings.listen == "0.0.0.0:9002"
    assert settings.metrics_listen == "0.0.0.0:9090"
    assert settings.config is None
    assert settings.redis_url == ""
    assert settings.max_body_bytes == 64 * MiB
    assert settings.max_buffered_bytes == 1 * GiB
    assert settings.body_idle_timeout_s == 30.0
    assert settings.body_ttl_s == 60.0
    assert settings.request_ttl_s == 900.0
    assert settings.shutdown_grace_s == 30.0
    assert settings.log_level == "INFO"


def test_env_vars_are_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {
        "KINFERENCE_LISTEN": "127.0.0.1:7000",
        "KINFERENCE_METRICS_LISTEN": "localhost:0",
        "KINFERENCE_CONFIG": "/etc/kinference/policy.yaml",
        "KINFERENCE_REDIS_URL": "redis://redis:6379/0",
        "KINFERENCE_MAX_BODY_BYTES": "1024",
        "KINFERENCE_MAX_BUFFERED_BYTES": "4096",
        "KINFERENCE_BODY_IDLE_TIMEOUT_S": "2.5",
        "KINFERENCE_BODY_TTL_S": "10",
        "KINFERENCE_REQUEST_TTL_S": "120",
        "KINFERENCE_SHUTDOWN_GRACE_S": "0",
        "KINFERENCE_LOG_LEVEL": "debug",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    assert settings.listen == "127.0.0.1:7000"
    assert settings.metrics_listen == "localhost:0"
    assert settings.config == Path("/etc/kinference/policy.yaml")
    assert settings.redis_url == "redis://redis:6379/0"
    assert settings.max_body_bytes == 1024
    assert settings.max_buffered_bytes == 4096
    assert settings.body_idle_timeout_s == 2.5
    assert settings.body_ttl_s == 10.0
    assert settings.request_ttl_s == 120.0
    assert settings.shutdown_grace_s == 0.0
    assert settings.log_level == "DEBUG"


def test_unknown_env_vars_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KINFERENCE_NOT_A_SETTING", "x")
    assert load_settings().listen == "0.0.0.0:9002"


def test_empty_config_env_var_means_no_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KINFERENCE_CONFIG", "")
    assert load_settings().config is None


def test_overrides_beat_env_and_none_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KINFERENCE_LISTEN", "127.0.0.1:7000")
    monkeypatch.setenv("KINFERENCE_LOG_LEVEL", "WARNING")
    settings = load_settings({"listen": "127.0.0.1:7001", "log_level": None})
    assert settings.listen == "127.0.0.1:7001"
    assert settings.log_level == "WARNING"  # None = flag not given, env value stands


def test_override_values_are_validated() -> None:
    with pytest.raises(SettingsError, match=r"^KINFERENCE_BODY_TTL_S: .*greater than 0"):
        load_settings({"body_ttl_s": -1})


def test_unknown_override_key_is_an_error() -> None:
    with pytest.raises(SettingsError, match=r"unknown setting.*listne"):
        load_settings({"listne": "127.0.0.1:1"})


def test_ipv6_listen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KINFERENCE_LISTEN", "[::]:9002")
    settings = load_settings()
    assert settings.listen == "[::]:9002"
    assert split_host_port(settings.listen) == ("::", 9002)


def test_empty_metrics_listen_disables_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KINFERENCE_METRICS_LISTEN", "")
    assert load_settings().metrics_listen == ""


def test_empty_grpc_listen_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KINFERENCE_LISTEN", "")
    with pytest.raises(SettingsError, match=r"^KINFERENCE_LISTEN: expected HOST:PORT"):
        load_settings()


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("KINFERENCE_MAX_BODY_BYTES", "abc", "valid integer"),
        ("KINFERENCE_MAX_BODY_BYTES", "0", "greater than 0"),
        ("KINFERENCE_MAX_BUFFERED_BYTES", "-5", "greater than 0"),
        ("KINFERENCE_BODY_IDLE_TIMEOUT_S", "0", "greater than 0"),
        ("KINFERENCE_BODY_TTL_S", "soon", "valid number"),
        ("KINFERENCE_REQUEST_TTL_S", "nan", "finite number"),
        ("KINFERENCE_SHUTDOWN_GRACE_S", "-1", "greater than or equal to 0"),
        ("KINFERENCE_LOG_LEVEL", "TRACE", "'DEBUG', 'INFO', 'WARNING' or 'ERROR'"),
        ("KINFERENCE_LISTEN", "9002", "expected HOST:PORT"),
        ("KINFERENCE_LISTEN", "::1:9002", "IPv6 host in brackets"),
        ("KINFERENCE_LISTEN", "[::g]:9002", "IPv6 address"),
        ("KINFERENCE_METRICS_LISTEN", "0.0.0.0:65536", "port must be 0..65535"),
        ("KINFERENCE_METRICS_LISTEN", "0.0.0.0:http", "port must be 0..65535"),
    ],
)
def test_invalid_env_value_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, problem: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert message.startswith(f"{name}: ")
    assert problem in message
    assert "\n" not in message


def test_invalid_integer_message_quotes_the_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KINFERENCE_MAX_BODY_BYTES", "abc")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value).startswith(
        "KINFERENCE_MAX_BODY_BYTES: Input should be a valid integer"
    )
    assert str(caught.value).endswith("(got 'abc')")


def test_several_problems_stay_on_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KINFERENCE_BODY_TTL_S", "x")
    monkeypatch.setenv("KINFERENCE_LOG_LEVEL", "loud")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert "\n" not in message
    assert "KINFERENCE_BODY_TTL_S: " in message
    assert "KINFERENCE_LOG_LEVEL: " in message


def test_buffer_smaller_than_one_body_names_both(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KINFERENCE_MAX_BODY_BYTES", "2048")
    monkeypatch.setenv("KINFERENCE_MAX_BUFFERED_BYTES", "1024")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert "KINFERENCE_MAX_BUFFERED_BYTES (1024)" in message
    assert "KINFERENCE_MAX_BODY_BYTES (2048)" in message


def test_buffer_equal_to_one_body_is_fine() -> None:
    settings = load_settings({"max_body_bytes": 4096, "max_buffered_bytes": 4096})
    assert settings.max_buffered_bytes == settings.max_body_bytes


def test_settings_are_frozen() -> None:
    settings = load_settings()
    with pytest.raises(ValidationError):
        settings.listen = "127.0.0.1:1"
    assert isinstance(settings, Settings)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0.0.0.0:9002", ("0.0.0.0", 9002)),
        ("localhost:0", ("localhost", 0)),
        (
            "picker.kinference.svc.cluster.local:65535",
            ("picker.kinference.svc.cluster.local", 65535),
        ),
        ("[::]:9002", ("::", 9002)),
        ("[::1]:80", ("::1", 80)),
        ("[fe80::1%eth0]:80", ("fe80::1%eth0", 80)),
    ],
)
def test_split_host_port_accepts(value: str, expected: tuple[str, int]) -> None:
    assert split_host_port(value) == expected
    assert format_host_port(*expected) == value


@pytest.mark.parametrize(
    "value",
    [
        "",
        "9002",
        ":9002",
        "host:",
        "host:-1",
        "host:+80",
        "host: 80",
        "host:65536",
        "host:١٢",  # non-ASCII digits
        "::1:9002",
        "[::1]9002",
        "[not-ipv6]:80",
        "bad_host:80",
        "-host:80",
        "10.0.0.500:80",
        "http://host:80",
    ],
)
def test_split_host_port_rejects(value: str) -> None:
    with pytest.raises(ValueError) as caught:
        split_host_port(value)
    assert repr(value) in str(caught.value)  # the operator sees what was wrong
