"""Who is calling: the tenant (API key map or header) and the QoS class (header).

With an API keys file, the API key decides the tenant (`Authorization: Bearer`, as OpenAI
SDKs send it, or `x-api-key`, as Anthropic's do) and an unknown or missing key is refused,
so a caller cannot name someone else's tenant in a header. Without one, the tenant header
is taken as given (a gateway behind an authenticating proxy), and a request without it has
the empty tenant, as the spec requires ("" = unknown).

The keys file:

    keys:
      sk-team-a-0123: team-a
      sk-batch-jobs: batch
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import yaml

from kinference.config.tenants import MAX_TENANT_BYTES
from kinference.v1 import picker_pb2 as pb

QOS_CLASSES: Mapping[str, pb.PickRequest.QosClass.ValueType] = {
    "interactive": pb.PickRequest.INTERACTIVE,
    "batch": pb.PickRequest.BATCH,
    "deferrable": pb.PickRequest.DEFERRABLE,
}


class ApiKeysError(ValueError):
    """The API keys file cannot be used; one line naming the file (never a key)."""


class CallerRejected(Exception):
    """The request names no usable identity or QoS; `status` is the HTTP status to answer."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


@dataclass(frozen=True)
class Caller:
    tenant: str
    qos: pb.PickRequest.QosClass.ValueType


class ApiKeys:
    """API key -> tenant, held as SHA-256 digests so a lookup reveals nothing by timing."""

    def __init__(self, keys: Mapping[str, str]) -> None:
        self._tenants = {_digest(key): tenant for key, tenant in keys.items()}

    def __len__(self) -> int:
        return len(self._tenants)

    def tenant(self, key: str) -> str | None:
        digest = _digest(key)
        for known, tenant in self._tenants.items():  # compare every digest in constant time
            if hmac.compare_digest(known, digest):
                return tenant
        return None


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def load_api_keys(path: Path | None) -> ApiKeys | None:
    """The keys of `path`, or None without a file. Raises `ApiKeysError`."""
    if path is None:
        return None
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise ApiKeysError(f"{path}: {exc.strerror}") from None
    except yaml.YAMLError:
        raise ApiKeysError(f"{path}: not YAML") from None  # the parser's text may quote a key
    keys = document.get("keys") if isinstance(document, dict) else None
    valid = isinstance(keys, dict) and all(
        isinstance(key, str) and key and isinstance(tenant, str) for key, tenant in keys.items()
    )
    if not valid or set(document) != {"keys"}:
        raise ApiKeysError(f"{path}: expected `keys:` mapping each API key to a tenant name")
    return ApiKeys(cast(dict[str, str], keys))


class CallerResolver:
    """Reads the tenant and QoS class of one request from its headers."""

    def __init__(self, keys: ApiKeys | None, tenant_header: str, qos_header: str) -> None:
        self._keys = keys
        self.tenant_header = tenant_header
        self.qos_header = qos_header

    def resolve(self, headers: Mapping[str, str]) -> Caller:
        """Raises `CallerRejected` for a bad key or an unknown QoS class."""
        return Caller(tenant=self._tenant(headers), qos=self._qos(headers))

    def _tenant(self, headers: Mapping[str, str]) -> str:
        if self._keys is None:
            named = headers.get(self.tenant_header, "").strip()
            if len(named.encode()) > MAX_TENANT_BYTES:  # the picker's bound, a clearer error
                raise CallerRejected(
                    400, "invalid_tenant", f"{self.tenant_header} is over {MAX_TENANT_BYTES} bytes"
                )
            return named
        scheme, _, key = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            key = headers.get("x-api-key", "")  # Anthropic's SDKs send the key here
        tenant = self._keys.tenant(key.strip()) if key.strip() else None
        if tenant is None:
            raise CallerRejected(401, "invalid_api_key", "missing or unknown API key")
        return tenant

    def _qos(self, headers: Mapping[str, str]) -> pb.PickRequest.QosClass.ValueType:
        text = headers.get(self.qos_header, "").strip().lower()
        if not text:
            return pb.PickRequest.INTERACTIVE
        qos = QOS_CLASSES.get(text)
        if qos is None:
            allowed = ", ".join(QOS_CLASSES)
            raise CallerRejected(
                400, "invalid_qos", f"{self.qos_header} must be one of {allowed}, got {text[:40]!r}"
            )
        return qos
