"""`kinference gateway`: its flags, and running it. Registered by `kinference.cli`.

This module imports no HTTP stack at load time, so `kinference` works without the
`gateway` extra and `kinference gateway` can say in one line what is missing.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import Any

from prometheus_client import CollectorRegistry

from kinference.config import Policy, PolicyError, default_policy, load_policy
from kinference.discovery import check_discovery
from kinference.gateway.backends import BackendsError, load_backends
from kinference.gateway.callers import ApiKeysError, load_api_keys
from kinference.gateway.settings import GatewaySettings, load_gateway_settings
from kinference.settings import Settings, SettingsError, load_settings

EXIT_USAGE = 2  # bad settings, files, or the extra missing: like argparse's usage errors
_FLAGS = {  # flag -> (setting, help)
    "--listen": ("listen", "HTTP HOST:PORT (env KINFERENCE_GATEWAY_LISTEN, default 0.0.0.0:8080)"),
    "--picker": (
        "picker",
        "gRPC target of a `kinference serve` picker (env KINFERENCE_GATEWAY_PICKER); "
        "empty (the default): host the picker in this process",
    ),
    "--backends": ("backends_file", "backends YAML (env KINFERENCE_GATEWAY_BACKENDS_FILE)"),
    "--api-keys": ("api_keys_file", "API keys YAML (env KINFERENCE_GATEWAY_API_KEYS_FILE)"),
    "--tenant-header": ("tenant_header", "tenant header (env KINFERENCE_GATEWAY_TENANT_HEADER)"),
    "--qos-header": ("qos_header", "QoS header (env KINFERENCE_GATEWAY_QOS_HEADER)"),
    "--pool": ("pool", "NAMESPACE/NAME sent as inference_pool (env KINFERENCE_GATEWAY_POOL)"),
    "--models": ("models", "ids GET /v1/models lists (env KINFERENCE_GATEWAY_MODELS)"),
}  # fmt: skip
# The hosted picker's own settings (kinference.settings, env KINFERENCE_*).
_PICKER_FLAGS = {
    "--config": ("config", "policy file (env KINFERENCE_CONFIG); remote mode: read for /v1/models"),
    "--grpc-listen": ("listen", "in-process: the picker's gRPC HOST:PORT (env KINFERENCE_LISTEN)"),
}  # fmt: skip


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `gateway` on the `kinference` command's subparsers."""
    gateway = commands.add_parser(
        "gateway", help="run the reference OpenAI-compatible HTTP gateway (extra: gateway)"
    )
    for flag, (setting, text) in _FLAGS.items():
        gateway.add_argument(flag, dest=setting, help=text)
    for flag, (setting, text) in _PICKER_FLAGS.items():
        gateway.add_argument(flag, dest=f"picker_{setting}", help=text)


def run(args: argparse.Namespace) -> int:
    """Load settings and files, then serve until SIGINT/SIGTERM; 2 on any setup error."""
    try:
        settings = load_gateway_settings(
            {setting: getattr(args, setting) for setting, _ in _FLAGS.values()}
        )
        backends = load_backends(settings.backends_file)
        api_keys = load_api_keys(settings.api_keys_file)
        picker_settings = load_settings(
            {setting: getattr(args, f"picker_{setting}") for setting, _ in _PICKER_FLAGS.values()}
        )
        policy = _hosted_policy(settings, picker_settings)
    except (SettingsError, BackendsError, ApiKeysError, PolicyError) as exc:
        print(f"kinference gateway: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        from kinference.gateway.app import build_app
        from kinference.gateway.embedded import picker_opener
        from kinference.gateway.server import GatewayServer
    except ImportError as exc:
        print(
            f"kinference gateway: error: {(exc.name or 'a module').split('.')[0]} is not "
            "installed; "
            "install the extra: pip install 'kinference[gateway]'",
            file=sys.stderr,
        )
        return EXIT_USAGE
    _configure_logging(settings)
    registry = CollectorRegistry()
    opener = picker_opener(settings, picker_settings, policy, registry)
    app = build_app(settings, backends, api_keys, picker=opener, registry=registry)
    _run_loop(_serve(GatewayServer, app, settings))
    return 0


def _hosted_policy(settings: GatewaySettings, picker: Settings) -> Policy | None:
    """The hosted picker's policy in in-process mode; None in remote mode."""
    if not settings.in_process:
        return None
    policy = load_policy(picker.config) if picker.config else default_policy()
    check_discovery(picker)
    return policy


async def _serve(server_class: Any, app: Any, settings: GatewaySettings) -> None:
    # The client timeout and the connection cap: the app's settings (kinference.gateway.server).
    server = server_class(
        app, settings.listen, log_config=_uvicorn_logging(), grace_s=settings.shutdown_grace_s
    )
    logging.getLogger(__name__).info(
        "kinference gateway on %s (port %d), picker %s",
        settings.listen,
        server.port,
        settings.picker or "in-process",
    )
    await server.serve_until_signalled()


def _run_loop(main: Any) -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; stay runnable without it
        asyncio.run(main)
    else:
        uvloop.run(main)


def _configure_logging(settings: GatewaySettings) -> None:
    logging.basicConfig(
        level=settings.log_level,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    # httpx logs every upstream request at INFO; uvicorn's access log already tells.
    logging.getLogger("httpx").setLevel(
        max(logging.WARNING, logging.getLevelName(settings.log_level))
    )


def _uvicorn_logging() -> dict[str, Any]:
    """uvicorn's loggers into the root handler; its access log names path and status only."""
    return {"version": 1, "disable_existing_loggers": False, "loggers": {"uvicorn": {}}}
