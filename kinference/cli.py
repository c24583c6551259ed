"""The `kinference` command line: serve, check-config."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry

from kinference import __version__
from kinference.app import App
from kinference.config import Policy, PolicyError, default_policy, load_policy
from kinference.settings import Settings, SettingsError, load_settings

EXIT_USAGE = 2  # bad settings or policy, like argparse's own usage errors


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kinference", description="Picks a model and destination for LLM requests."
    )
    parser.add_argument("--version", action="version", version=f"kinference {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the picker (gRPC kinference.v1.Picker)")
    serve.add_argument("--config", type=Path, help="policy file (env KINFERENCE_CONFIG)")
    serve.add_argument("--listen", help="gRPC HOST:PORT (env KINFERENCE_LISTEN)")
    check = commands.add_parser("check-config", help="validate a policy file and exit")
    check.add_argument("file", type=Path)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "check-config":
            return _check_config(args.file)
        settings = load_settings({"config": args.config, "listen": args.listen})
        policy = load_policy(settings.config) if settings.config else default_policy()
    except (SettingsError, PolicyError) as exc:
        print(f"kinference: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    _configure_logging(settings)
    _run(settings, policy)
    return 0


def _check_config(path: Path) -> int:
    policy = load_policy(path)
    counts = {
        "pool": len(policy.pools),
        "provider": len(policy.providers),
        "model": len(policy.model_names),
        "tenant rule": len(policy.tenants),
    }
    summary = ", ".join(f"{n} {what}{'s' if n != 1 else ''}" for what, n in counts.items())
    print(f"{path}: ok ({summary})")
    return 0


def _configure_logging(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )


def _run(settings: Settings, policy: Policy) -> None:
    if not settings.config:
        logging.getLogger(__name__).warning(
            "no policy file given: serving the built-in example policy (pool default/chat)"
        )
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; stay runnable without it
        asyncio.run(_serve(settings, policy))
    else:
        uvloop.run(_serve(settings, policy))


async def _serve(settings: Settings, policy: Policy) -> None:
    # Built inside the running loop: a grpc.aio server binds to the loop it is created on.
    await App(settings, policy, CollectorRegistry()).serve()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
