"""Building the kustomize trees with `kubectl kustomize` and validating what they build.

Built-in kinds are checked against the Kubernetes OpenAPI schemas (as JSON schemas)
shipped by the `kubernetes-validate` package, in strict mode (an unknown or misspelt field
is an error); CRD kinds against the small JSON schemas in `schemas/`.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from kubernetes_validate.utils import latest_version, major_minor, schema_contents
from referencing import Registry, Resource

REPO = Path(__file__).resolve().parents[2]
KUSTOMIZE = REPO / "deploy" / "kustomize"
BASE = KUSTOMIZE / "base"
OVERLAYS = ("standalone", "redis", "external-redis", "production")
COMPONENTS = ("hpa", "servicemonitor", "networkpolicy", "gateway")
NAMESPACE = "kinference"
# Native gRPC probes and topology spread's matchLabelKeys need Kubernetes 1.27.
OLDEST_KUBERNETES = "1.27"
# Kinds without a built-in schema: (apiVersion, kind) -> schema file in schemas/.
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor-monitoring-v1.json",
}
_BUILD_TIMEOUT_S = 60

Manifest = dict[str, Any]


def kubectl() -> str:
    """The kubectl binary, or skip the test with the reason."""
    found = shutil.which("kubectl")
    if found is None:
        pytest.skip("kubectl not found on PATH: cannot run `kubectl kustomize`")
    return found


def build(directory: Path) -> list[Manifest]:
    """The objects `kubectl kustomize DIRECTORY` builds; a failed build fails the test."""
    result = subprocess.run(
        [kubectl(), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=_BUILD_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, f"kubectl kustomize {directory}: {result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


class Schemas:
    """Validates objects against their schemas, loading each schema once.

    Built-in kinds use the strict schemas of `kubernetes-validate` (the files its own
    `validate` reads), for the oldest Kubernetes these manifests support and for the newest
    the package ships; CRD kinds use the files in `schemas/`.
    """

    def __init__(self) -> None:
        self.versions = (OLDEST_KUBERNETES, major_minor(latest_version()))
        self._validators: dict[tuple[str, str, str], jsonschema.Draft202012Validator] = {}
        self._valid: set[str] = set()  # objects already found valid, as JSON

    def validate(self, manifest: Manifest) -> None:
        """Raise `jsonschema.ValidationError` if the object is not valid, `KeyError` if
        its kind has no schema."""
        key = json.dumps(manifest, sort_keys=True)
        if key in self._valid:  # overlays share most objects
            return
        api_version, kind = manifest["apiVersion"], manifest["kind"]
        if (api_version, kind) in CRD_SCHEMAS:
            self._validator("crd", api_version, kind).validate(manifest)
        else:
            for version in self.versions:
                self._validator(version, api_version, kind).validate(manifest)
        self._valid.add(key)

    def _validator(
        self, version: str, api_version: str, kind: str
    ) -> jsonschema.Draft202012Validator:
        key = (version, api_version, kind)
        if key not in self._validators:
            self._validators[key] = (
                _crd_validator(api_version, kind)
                if version == "crd"
                else _builtin_validator(version, api_version, kind)
            )
        return self._validators[key]


def _crd_validator(api_version: str, kind: str) -> jsonschema.Draft202012Validator:
    path = Path(__file__).parent / "schemas" / CRD_SCHEMAS[(api_version, kind)]
    return jsonschema.Draft202012Validator(json.loads(path.read_text()))


def _builtin_validator(
    version: str, api_version: str, kind: str
) -> jsonschema.Draft202012Validator:
    # Named as kubernetes-validate names them: rbac.authorization.k8s.io/v1 -> rbac-v1.
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    directory = f"kubernetes-json-schema/v{version}.0-local-strict"
    try:
        schema = schema_contents(f"{directory}/{kind.lower()}-{group_version}.json", version)
    except FileNotFoundError:
        raise KeyError(f"no schema for {api_version} {kind} in Kubernetes {version}") from None
    definitions = schema_contents(f"{directory}/_definitions.json", version)
    registry: Registry[Any] = Resource.from_contents(definitions) @ (
        Resource.from_contents(schema) @ Registry()
    )
    return jsonschema.Draft202012Validator(schema, registry=registry)


def find(manifests: list[Manifest], kind: str, name: str | None = None) -> Manifest:
    """The one object of `kind` (and `name`, if given)."""
    found = [m for m in manifests if m["kind"] == kind and name in (None, m["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def kinds(manifests: list[Manifest]) -> list[str]:
    return sorted(m["kind"] for m in manifests)


def container(workload: Manifest) -> Manifest:
    """The single container of a Deployment or StatefulSet."""
    containers = workload["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def env_list(workload: Manifest) -> list[Manifest]:
    return list(container(workload).get("env", []))


def plain_env(workload: Manifest) -> dict[str, str]:
    """Environment variables given as literal values (not from Secrets or fields)."""
    return {e["name"]: e["value"] for e in env_list(workload) if "value" in e}


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    """Whether a matchLabels selector selects an object with these labels."""
    return all(labels.get(key) == value for key, value in selector.items())


def walk(value: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) pair in a nested document."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield key, item
            yield from walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from walk(item)
