"""Gateway settings: `KINFERENCE_GATEWAY_*` environment variables, CLI flags on top.

Every problem surfaces as one `SettingsError` line naming the variable, as for the picker's
own settings (`kinference.settings`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from kinference.config.fields import check_ref
from kinference.settings import LogLevel, SettingsError, split_host_port

ENV_PREFIX = "KINFERENCE_GATEWAY_"

# An HTTP field name (RFC 9110 token); kept lower-case, as ASGI servers hand them over.
_HEADER = re.compile(r"[!#$%&'*+.^_`|~0-9a-z-]+")


class GatewaySettings(BaseSettings):
    """Gateway process settings; each field is read from `KINFERENCE_GATEWAY_<FIELD>`."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, frozen=True, extra="forbid", allow_inf_nan=False
    )

    listen: str = "0.0.0.0:8080"  # HTTP, HOST:PORT
    # gRPC target of a picker (`kinference serve`); "" = host the picker in this process.
    picker: str = ""
    backends_file: Path | None = None  # YAML: provider namespace/name -> base URL, credential
    api_keys_file: Path | None = None  # YAML: API key -> tenant; set = keys are required
    tenant_header: str = "x-kinference-tenant"  # read when no api_keys_file is given
    qos_header: str = "x-kinference-qos"  # interactive | batch | deferrable
    pool: str = ""  # NAMESPACE/NAME sent as PickRequest.inference_pool; "" names none
    models: str = ""  # comma-separated ids listed by GET /v1/models; "" = the policy's names
    # Bodies over this are refused with 413 (the picker's own default limit, 64 MiB).
    max_body_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    rpc_timeout_s: float = Field(default=10.0, gt=0)  # Pick, reports, Abort (not the body RPCs)
    connect_timeout_s: float = Field(default=10.0, gt=0)  # upstream TCP/TLS connect
    # Longest silence from the upstream, seconds: a long prompt's first token may take minutes.
    read_timeout_s: float = Field(default=600.0, gt=0)
    # Longest a client may take to send a request head, or leave a response unread with its
    # socket full, seconds (kinference.gateway.guard; nginx's header and send timeouts).
    client_timeout_s: float = Field(default=60.0, gt=0)
    # The longest a request body may take to arrive in all, seconds; past it, 408
    # (kinference.gateway.upload; the picker's idle timeout bounds each silence only).
    body_total_timeout_s: float = Field(default=300.0, gt=0)
    # The most client connections served at once; past it, a connection is answered 503 at
    # once and closed (kinference.gateway.capacity; nginx's worker_connections).
    max_client_connections: int = Field(default=4096, gt=0)
    shutdown_grace_s: int = Field(default=30, ge=0)  # seconds for responses under way at SIGTERM
    log_level: LogLevel = "INFO"

    @field_validator("listen")
    @classmethod
    def _validate_listen(cls, value: str) -> str:
        split_host_port(value)
        return value

    @field_validator("tenant_header", "qos_header", mode="before")
    @classmethod
    def _validate_header(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        lowered = value.strip().lower()
        if not _HEADER.fullmatch(lowered):
            raise ValueError(f"expected an HTTP header name, got {value!r}")
        return lowered

    @field_validator("pool")
    @classmethod
    def _validate_pool(cls, value: str) -> str:
        return check_ref(value) if value else value  # as the policy names pools

    @field_validator("backends_file", "api_keys_file", mode="before")
    @classmethod
    def _empty_path_is_none(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_log_level(cls, value: object) -> object:
        return value.strip().upper() if isinstance(value, str) else value

    @property
    def in_process(self) -> bool:
        """Whether the gateway hosts the picker itself (no picker target given)."""
        return not self.picker.strip()

    @property
    def model_ids(self) -> tuple[str, ...]:
        return tuple(name.strip() for name in self.models.split(",") if name.strip())

    @property
    def pool_ref(self) -> tuple[str, str] | None:
        namespace, _, name = self.pool.partition("/")
        return (namespace, name) if name else None


def env_name(field: str) -> str:
    """The environment variable that sets `field`, e.g. `KINFERENCE_GATEWAY_LISTEN`."""
    return f"{ENV_PREFIX}{field.upper()}"


def load_gateway_settings(overrides: Mapping[str, object] | None = None) -> GatewaySettings:
    """Environment first, then `overrides` (CLI flags; `None` means not given).

    Raises `SettingsError` with one line naming the variable on any invalid value.
    """
    given: dict[str, Any] = {k: v for k, v in (overrides or {}).items() if v is not None}
    unknown = sorted(set(given) - set(GatewaySettings.model_fields))
    if unknown:
        raise SettingsError(f"unknown setting(s): {', '.join(unknown)}")
    try:
        return GatewaySettings(**given)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            name = env_name(str(error["loc"][0])) if error["loc"] else "settings"
            problems.append(f"{name}: {error['msg'].removeprefix('Value error, ')}")
        raise SettingsError("; ".join(problems)) from exc
