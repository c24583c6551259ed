"""The backends file: where a provider's `namespace/name` (a GatewayBackend) is reached.

The picker hands back `ProviderTarget.backend_ref` and a path; resolving the reference, the
base URL and the credential is the caller's job (spec). The file:

    backends:
      ai/openai:
        base_url: https://api.openai.com          # bare origin; the pick's path is appended
        api_key_env: OPENAI_API_KEY               # or api_key_file: /var/run/secrets/openai/key
      ai/claude:
        base_url: https://api.anthropic.com
        api_key_env: ANTHROPIC_API_KEY
        auth: x-api-key                           # Anthropic's header (default: bearer)
        headers: {anthropic-version: "2023-06-01"}  # sent unless the client sent it

A credential is read when a request is dispatched, not when the file is loaded, so a rotated
Secret file or a variable set later is picked up; it is never logged.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, Self

import httpx
import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator


class BackendsError(ValueError):
    """The backends file cannot be used; `str()` is one line naming the file and the problem."""


class CredentialMissing(Exception):
    """A backend names a credential that is not there now (unset variable, unreadable file)."""


class Backend(BaseModel):
    """One GatewayBackend: its base URL and where its bearer credential comes from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str
    api_key_env: str | None = None
    api_key_file: Path | None = None
    # How the credential is sent: `Authorization: Bearer KEY` (OpenAI-style APIs) or
    # `x-api-key: KEY` (Anthropic's API).
    auth: Literal["bearer", "x-api-key"] = "bearer"
    # Headers every request to this backend carries unless the client sent them (e.g.
    # Anthropic's required `anthropic-version`, for a chat client translated to it).
    headers: dict[str, str] = {}

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")) or not httpx.URL(value).host:
            raise ValueError(f"expected an http:// or https:// URL, got {value!r}")
        return value.rstrip("/")  # the pick's path always starts with '/'

    @model_validator(mode="after")
    def _one_credential(self) -> Self:
        if self.api_key_env is not None and self.api_key_file is not None:
            raise ValueError("give api_key_env or api_key_file, not both")
        return self

    @field_validator("headers")
    @classmethod
    def _header_names(cls, value: dict[str, str]) -> dict[str, str]:
        lowered = {name.lower(): text for name, text in value.items()}
        for name in lowered:
            if not name or not all(c.isalnum() or c in "-_" for c in name):
                raise ValueError(f"not a header name: {name!r}")
            if name in ("authorization", "x-api-key", "host", "content-length"):
                raise ValueError(f"{name} is set by the gateway")
        return lowered

    def credential(self) -> str | None:
        """The bearer token to send, or None when the backend needs none."""
        if self.api_key_env is not None:
            value = os.environ.get(self.api_key_env, "").strip()
            if not value:
                raise CredentialMissing(f"environment variable {self.api_key_env} is not set")
            return value
        if self.api_key_file is not None:
            try:
                value = self.api_key_file.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise CredentialMissing(
                    f"cannot read {self.api_key_file}: {exc.strerror}"
                ) from None
            if not value:
                raise CredentialMissing(f"{self.api_key_file} is empty")
            return value
        return None


class _BackendsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backends: dict[str, Backend] = {}

    @field_validator("backends")
    @classmethod
    def _refs(cls, value: dict[str, Backend]) -> dict[str, Backend]:
        for ref in value:
            namespace, _, name = ref.partition("/")
            if not namespace or not name or "/" in name:
                raise ValueError(f"expected keys as NAMESPACE/NAME, got {ref!r}")
        return value


def load_backends(path: Path | None) -> Mapping[str, Backend]:
    """Backends by `namespace/name`; none without a file. Raises `BackendsError`."""
    if path is None:
        return {}
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        return _BackendsFile.model_validate(document).backends
    except OSError as exc:
        raise BackendsError(f"{path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise BackendsError(f"{path}: not YAML: {str(exc).splitlines()[0]}") from None
    except ValidationError as exc:
        raise BackendsError(f"{path}: {_describe(exc)}") from None


def _describe(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    message = error["msg"].removeprefix("Value error, ")
    return f"{where}: {message}" if where else message
