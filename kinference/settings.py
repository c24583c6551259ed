"""Process settings: where to listen, body budgets, timeouts, log level.

Settings come from `KINFERENCE_*` environment variables, and CLI flags passed to
`load_settings` as overrides win over the environment. Every problem surfaces as one
`SettingsError` line naming the environment variable, so an operator reading a crash loop
in `kubectl logs` knows which variable to fix.

The routing policy (pools, models, ...) is not here: it lives in a file, see
`kinference.config`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import Field, FilePath, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, SettingsConfigDict

from kinference.cluster.connection import RedisTls, check_url
from kinference.hostport import format_host_port, split_host_port

__all__ = ["ENV_PREFIX", "Settings", "SettingsError", "format_host_port", "split_host_port"]

ENV_PREFIX = "KINFERENCE_"

MiB = 1024 * 1024
GiB = 1024 * MiB

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]
LogFormat = Literal["auto", "json", "text"]

# Longest offending value quoted back in an error message, in characters.
_MAX_QUOTED = 60
# A Kubernetes namespace name (an RFC 1123 label in lower case), or "".
_NAMESPACE_OR_EMPTY = r"^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)?$"
# Settings naming PEM files; an empty value means "not set".
_FILE_SETTINGS = (
    "redis_tls_ca_file",
    "redis_tls_cert_file",
    "redis_tls_key_file",
    "tls_cert_file",
    "tls_key_file",
    "tls_client_ca_file",
    "discovery_kubeconfig",
)


class SettingsError(ValueError):
    """Invalid process settings; `str()` is one line naming the env var and the problem."""


class Settings(BaseSettings):
    """Process settings; each field is read from `KINFERENCE_<FIELD NAME IN UPPER CASE>`."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        frozen=True,
        # Overrides are matched by field name; a typo there is a bug, not a setting to ignore.
        extra="forbid",
        # A NaN timeout would compare false against everything and never fire.
        allow_inf_nan=False,
    )

    listen: str = "0.0.0.0:9002"  # gRPC, HOST:PORT
    metrics_listen: str = "0.0.0.0:9090"  # Prometheus /metrics, HOST:PORT; "" disables it
    config: Path | None = None  # routing policy file; None = built-in default policy
    redis_url: str = ""  # "" = standalone, no state shared between replicas
    redis_prefix: str = Field(default="kinference:", min_length=1)  # every key starts with it
    redis_timeout_s: float = Field(default=0.5, gt=0)  # per command and per connect attempt
    # The shared view counts as stale (Picks answer DEGRADED) after this long without a read.
    redis_stale_after_s: float = Field(default=2.0, gt=0)
    redis_stream_maxlen: int = Field(default=20_000, ge=100)  # events entries kept (approx.)
    # Milliseconds a replica gathers events before publishing them, and pauses between
    # reads of the others': fewer Redis commands per request, at this much propagation delay.
    redis_batch_ms: int = Field(default=15, ge=0, le=1_000)
    # Key layout: "pools" gives each pool its own hash tag (Redis Cluster spreads pools over
    # masters; a replica reads only its pools' streams); "single" is the schema before
    # pools had tags, for the first step of an upgrade (docs/redis.md#upgrading).
    redis_layout: Literal["pools", "single"] = "pools"
    # PEM files for a rediss:// URL: the CA to trust, and a client certificate and key.
    redis_tls_ca_file: FilePath | None = None
    redis_tls_cert_file: FilePath | None = None
    redis_tls_key_file: FilePath | None = None
    # TLS on the gRPC listener (PEM files, both or neither; re-read when they change). With
    # a client CA, every client must present a certificate it signed (mTLS).
    tls_cert_file: FilePath | None = None
    tls_key_file: FilePath | None = None
    tls_client_ca_file: FilePath | None = None
    # RPCs one connection may run at once (HTTP/2 MAX_CONCURRENT_STREAMS); further calls
    # wait in the client until one ends. See docs/security.md.
    max_concurrent_streams: int = Field(default=1024, ge=1)
    max_body_bytes: int = Field(default=64 * MiB, gt=0)  # one request body
    max_buffered_bytes: int = Field(default=1 * GiB, gt=0)  # all bodies held at once
    body_idle_timeout_s: float = Field(default=30.0, gt=0)  # max gap between PushBody chunks
    # Per PickerSession stream (docs/gateway.md): requests open at once (a `start` beyond
    # fails with `server_busy`), and answers queued unwritten before the picker stops
    # reading the stream (its caller is not reading).
    session_max_open_requests: int = Field(default=1024, ge=1)
    session_max_queued_frames: int = Field(default=4096, ge=1)
    body_ttl_s: float = Field(default=60.0, gt=0)  # unpicked or unpulled bodies are dropped
    request_ttl_s: float = Field(default=900.0, gt=0)  # a pick counts as load at most this long
    shutdown_grace_s: float = Field(default=30.0, ge=0)  # drain time after SIGTERM
    # Precise prefix mode's replays (an engine's replay socket asked for batches again: on
    # subscribing, after a gap): what one replay may cost this replica. Answers (batches)
    # and their bytes received per replay, the longest silence between two answers, the
    # whole replay's time, and the replays run at once (the others wait their turn, holding
    # live batches: a replica starting beside many warm engines). A replay cut short applies
    # what came; the worker is then a gap (docs/architecture.md#replay-limits).
    kv_replay_max_batches: int = Field(default=10_000, ge=1)  # vLLM buffers 10,000 batches
    kv_replay_max_bytes: int = Field(default=64 * MiB, ge=1024)
    kv_replay_timeout_s: float = Field(default=2.0, gt=0)
    kv_replay_deadline_s: float = Field(default=10.0, gt=0)
    kv_replay_concurrency: int = Field(default=2, ge=1)  # 4: twice the loop lag, h134
    log_level: LogLevel = "INFO"
    # json: one JSON object per line (for log collectors); text: readable lines; auto: text
    # when stderr is a terminal, json otherwise.
    log_format: LogFormat = "auto"
    # Distinct tenants given their own `tenant` label value; later ones share "(other)".
    metrics_max_tenants: int = Field(default=100, ge=1, le=10_000)
    # Tenant budgets while Redis is unavailable (docs/redis.md): "share" admits a tenant up to
    # its budget over the replicas last counted (fail-open to a share); "closed" admits no
    # request of a budgeted tenant until Redis answers again.
    tenant_budget_offline: Literal["share", "closed"] = "share"
    # Replicas assumed for the share before Redis ever answered (the base Deployment's 3).
    tenant_budget_expected_replicas: int = Field(default=3, ge=1)
    # Kubernetes discovery (docs/discovery.md): "kubernetes" adds the namespace's
    # InferencePools and their ready pods to the policy file's pools (needs the k8s extra).
    discovery: Literal["off", "kubernetes"] = "off"
    # "" = the picker's own namespace in-cluster (else the kubeconfig context's).
    discovery_namespace: str = Field(default="", pattern=_NAMESPACE_OR_EMPTY)
    discovery_kubeconfig: FilePath | None = None  # None = in-cluster, then $KUBECONFIG
    # API server URL reached without credentials (e.g. `kubectl proxy`); wins over both.
    discovery_server: str = Field(default="", pattern=r"^(https?://\S+)?$")

    @field_validator("listen")
    @classmethod
    def _validate_listen(cls, value: str) -> str:
        split_host_port(value)
        return value

    @field_validator("metrics_listen")
    @classmethod
    def _validate_metrics_listen(cls, value: str) -> str:
        if value:
            split_host_port(value)
        return value

    @field_validator("redis_url")
    @classmethod
    def _validate_redis_url(cls, value: str) -> str:
        return check_url(value) if value else value

    @field_validator("config", *_FILE_SETTINGS, mode="before")
    @classmethod
    def _empty_config_is_none(cls, value: object) -> object:
        # `KINFERENCE_CONFIG=` in a manifest means "no file", not the current directory.
        return None if value == "" else value

    @field_validator("log_format", mode="before")
    @classmethod
    def _lower_log_format(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_log_level(cls, value: object) -> object:
        return value.strip().upper() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _buffer_holds_one_body(self) -> Self:
        if self.max_buffered_bytes < self.max_body_bytes:
            raise ValueError(
                f"{env_name('max_buffered_bytes')} ({self.max_buffered_bytes}) must be >= "
                f"{env_name('max_body_bytes')} ({self.max_body_bytes}) so that one body of the "
                "maximum size fits"
            )
        return self

    @model_validator(mode="after")
    def _tls_files_consistent(self) -> Self:
        check_tls_files(self)
        return self

    def redis_tls(self) -> RedisTls:
        """The PEM files a rediss:// connection uses."""
        return RedisTls(self.redis_tls_ca_file, self.redis_tls_cert_file, self.redis_tls_key_file)


def check_tls_files(settings: Settings) -> None:
    """Certificates come with their keys, a client CA only with a server certificate, and
    Redis TLS files only with a rediss:// URL (they would be silently unused otherwise)."""
    pairs = [("tls_cert_file", "tls_key_file"), ("redis_tls_cert_file", "redis_tls_key_file")]
    for cert, key in pairs:
        if (getattr(settings, cert) is None) != (getattr(settings, key) is None):
            raise ValueError(f"{env_name(cert)} and {env_name(key)} must be set together")
    if settings.tls_client_ca_file is not None and settings.tls_cert_file is None:
        raise ValueError(
            f"{env_name('tls_client_ca_file')} needs {env_name('tls_cert_file')} (mTLS is TLS)"
        )
    redis_files = settings.redis_tls_ca_file or settings.redis_tls_cert_file
    if redis_files and not settings.redis_url.startswith("rediss"):
        raise ValueError(
            f"{env_name('redis_tls_ca_file')} and {env_name('redis_tls_cert_file')} need a "
            f"rediss:// {env_name('redis_url')}"
        )


def env_name(field: str) -> str:
    """The environment variable that sets `field`, e.g. `KINFERENCE_MAX_BODY_BYTES`."""
    return f"{ENV_PREFIX}{field.upper()}"


def load_settings(overrides: Mapping[str, object] | None = None) -> Settings:
    """Read settings from the environment, then apply `overrides` (CLI flags) on top.

    Override keys are field names; `None` values mean "flag not given" and are skipped.
    Raises `SettingsError` (one line) on an unknown override key or an invalid value.
    """
    given: dict[str, Any] = {
        key: value for key, value in (overrides or {}).items() if value is not None
    }
    unknown = sorted(set(given) - set(Settings.model_fields))
    if unknown:
        raise SettingsError(f"unknown setting(s): {', '.join(unknown)}")
    try:
        return Settings(**given)
    except ValidationError as exc:
        raise SettingsError(_one_line(exc)) from exc


def _one_line(exc: ValidationError) -> str:
    problems = [_describe(error) for error in exc.errors()]
    return "; ".join(problems)


def _describe(error: ErrorDetails) -> str:
    """`KINFERENCE_FIELD: message (got 'value')` for one pydantic error."""
    message = error["msg"].removeprefix("Value error, ")
    if not error["loc"]:  # a cross-field check; its message names the variables itself
        return message
    name = env_name(str(error["loc"][0]))
    if error["type"] == "value_error":  # our own validators already quote the value
        return f"{name}: {message}"
    return f"{name}: {message} (got {_quote(error['input'])})"


def _quote(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_QUOTED else text[: _MAX_QUOTED - 3] + "..."
