"""The Kubernetes API as list and watch calls over HTTP, and the connection to it.

lightkube (the `k8s` extra) supplies the connection: kubeconfig parsing, the in-cluster
service account (its token re-read when the kubelet rotates it), client certificates and
exec credential plugins. The list/watch protocol itself is spoken here, so that
resourceVersion tracking, bookmarks and 410 Gone stay under the watcher's control.
lightkube is imported only when discovery is on: the picker runs without it otherwise.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx2
    from lightkube.config.kubeconfig import SingleConfig

# Longest wait for one list response or watch line, beyond the watch's own timeout
# (seconds). A connection that sends nothing this long is dead, not quiet: the API server
# ends every watch by `timeoutSeconds`.
READ_MARGIN_S = 30.0
CONNECT_TIMEOUT_S = 10.0
HTTP_GONE = 410


class ApiError(Exception):
    """The API server answered with a failure Status (`code` is its HTTP status)."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason


class WatchGone(ApiError):
    """410 Gone: the resourceVersion is older than the server keeps; list again."""


class K8sExtraMissing(RuntimeError):
    """KINFERENCE_DISCOVERY=kubernetes without the `k8s` extra installed."""


@dataclass(frozen=True)
class Collection:
    """One namespaced collection, e.g. `/api/v1/namespaces/ns/pods` with a label selector."""

    path: str
    label_selector: str = ""

    def params(self, **extra: str) -> dict[str, str]:
        params = {"labelSelector": self.label_selector} if self.label_selector else {}
        return params | extra


def status_error(status: Any, default_code: int) -> ApiError:
    """The exception for a Kubernetes `Status` object (or whatever came instead)."""
    fields = status if isinstance(status, dict) else {}
    given = fields.get("code")
    code = given if isinstance(given, int) else default_code
    reason = str(fields.get("reason") or "")
    message = str(fields.get("message") or "")[:200]  # a Status message names no secrets
    error_type = WatchGone if code == HTTP_GONE else ApiError
    return error_type(code, reason, message)


class KubeApi:
    """List and watch calls on one authenticated connection to the API server."""

    def __init__(self, client: httpx2.AsyncClient, namespace: str) -> None:
        self._client = client
        self.namespace = namespace  # where InferencePools and pods are watched

    async def list(self, collection: Collection) -> dict[str, Any]:
        """The collection as a `...List` object (`items`, `metadata.resourceVersion`)."""
        response = await self._client.get(collection.path, params=collection.params())
        body = _json_or_none(response.content)
        if response.status_code != 200 or not isinstance(body, dict):
            raise status_error(body, response.status_code)
        return body

    async def watch(
        self, collection: Collection, resource_version: str, timeout_s: int
    ) -> AsyncIterator[dict[str, Any]]:
        """Watch events after `resource_version` until the server ends the watch.

        Yields each `{"type": ..., "object": ...}` event, BOOKMARK included; an ERROR event
        raises (`WatchGone` for 410).
        """
        params = collection.params(
            watch="1",
            resourceVersion=resource_version,
            allowWatchBookmarks="true",
            timeoutSeconds=str(timeout_s),
        )
        async with self._client.stream("GET", collection.path, params=params) as response:
            if response.status_code != 200:
                raise status_error(_json_or_none(await response.aread()), response.status_code)
            async for line in response.aiter_lines():
                if line.strip():
                    yield _event(line)

    async def aclose(self) -> None:
        await self._client.aclose()


def _json_or_none(content: bytes) -> Any:
    try:
        return json.loads(content)
    except ValueError:
        return None


def _event(line: str) -> dict[str, Any]:
    event = json.loads(line)
    if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
        raise ValueError("watch event without an object")
    if event.get("type") == "ERROR":
        raise status_error(event["object"], 500)
    return event


def client_config(*, kubeconfig: Path | None, server: str) -> SingleConfig:
    """The connection settings: an explicit server URL (no credentials, e.g. `kubectl
    proxy`), a kubeconfig file, or else the in-cluster service account (then $KUBECONFIG
    or ~/.kube/config). Raises K8sExtraMissing, or ValueError naming the problem."""
    try:
        from lightkube.config.kubeconfig import KubeConfig
        from lightkube.config.models import Cluster, User
        from lightkube.core.exceptions import ConfigError
    except ImportError as exc:
        raise K8sExtraMissing(
            "the k8s extra is not installed: pip install 'kinference[k8s]'"
        ) from exc
    try:
        if server:
            config = KubeConfig.from_one(cluster=Cluster(server=server), user=User())
        elif kubeconfig is not None:
            config = KubeConfig.from_file(kubeconfig)
        else:
            config = KubeConfig.from_env()
        single = config.get()
    except (ConfigError, KeyError) as exc:  # KeyError: in-cluster env vars missing
        raise ValueError(f"Kubernetes client configuration: {exc}") from exc
    if single is None:
        raise ValueError("Kubernetes client configuration: the kubeconfig has no current context")
    return single


def connect(
    *, namespace: str, kubeconfig: Path | None, server: str, watch_timeout_s: int
) -> KubeApi:
    """Open the connection (see `client_config`). An empty `namespace` means the context's
    (in-cluster: the pod's own)."""
    single = client_config(kubeconfig=kubeconfig, server=server)  # checks the extra first
    import httpx2
    from lightkube.config.client_adapter import AsyncClient, ConnectionParams

    timeout = httpx2.Timeout(watch_timeout_s + READ_MARGIN_S, connect=CONNECT_TIMEOUT_S)
    # The API server is reached directly, never through an HTTP(S)_PROXY meant for egress.
    client = AsyncClient(single, ConnectionParams(timeout=timeout, trust_env=False))
    return KubeApi(client, namespace or single.namespace)
