"""Discovery settings, and what happens without the k8s extra."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kinference.cli import main
from kinference.discovery import K8sExtraMissing
from kinference.discovery.api import connect
from kinference.settings import SettingsError, load_settings


def test_discovery_is_off_by_default_and_settings_are_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert load_settings().discovery == "off"
    monkeypatch.setenv("KINFERENCE_DISCOVERY", "consul")
    with pytest.raises(SettingsError, match="KINFERENCE_DISCOVERY"):
        load_settings()
    monkeypatch.setenv("KINFERENCE_DISCOVERY", "kubernetes")
    monkeypatch.setenv("KINFERENCE_DISCOVERY_NAMESPACE", "Not_A_Namespace")
    with pytest.raises(SettingsError, match="KINFERENCE_DISCOVERY_NAMESPACE"):
        load_settings()
    monkeypatch.setenv("KINFERENCE_DISCOVERY_NAMESPACE", "models")
    monkeypatch.setenv("KINFERENCE_DISCOVERY_SERVER", "ftp://x")
    with pytest.raises(SettingsError, match="KINFERENCE_DISCOVERY_SERVER"):
        load_settings()
    monkeypatch.setenv("KINFERENCE_DISCOVERY_SERVER", "http://127.0.0.1:8001")
    monkeypatch.setenv("KINFERENCE_DISCOVERY_KUBECONFIG", "")
    settings = load_settings()
    assert (settings.discovery_namespace, settings.discovery_kubeconfig) == ("models", None)


def test_without_the_k8s_extra_the_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "lightkube.config.kubeconfig", None)
    with pytest.raises(K8sExtraMissing, match=r"kinference\[k8s\]"):
        connect(namespace="", kubeconfig=None, server="http://127.0.0.1:1", watch_timeout_s=1)


def test_a_kubeconfig_without_a_context_is_a_configuration_error(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    with pytest.raises(ValueError, match="Kubernetes client configuration"):
        connect(namespace="", kubeconfig=path, server="", watch_timeout_s=1)


def test_serve_stops_with_one_line_when_discovery_cannot_connect(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KINFERENCE_DISCOVERY", "kubernetes")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # not in-cluster either
    assert main(["serve", "--listen", "127.0.0.1:0"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("kinference: error: KINFERENCE_DISCOVERY=kubernetes:")
    assert "\n" not in error
