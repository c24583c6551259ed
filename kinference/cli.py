"""The `kinference` command line: serve, check-config, providers list|clear, state."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry
from redis.exceptions import RedisError

from kinference import __version__
from kinference.app import App
from kinference.cluster.blacklist_keys import Entry, clear_blacklist, list_blacklist
from kinference.cluster.connection import Timeouts, connect
from kinference.cluster.keys import Keys
from kinference.config import Policy, PolicyError, default_policy, load_policy
from kinference.discovery import check_discovery
from kinference.gateway import cli as gateway_cli
from kinference.ops.command import add_state_parser, run_state
from kinference.ops.logs import configure_logging
from kinference.ops.table import ttl_text
from kinference.settings import Settings, SettingsError, load_settings

EXIT_USAGE = 2  # bad settings or policy, like argparse's own usage errors
EXIT_FAILED = 1  # the command could not be done (Redis unreachable)
_TABLE = ("PROVIDER", "REASON", "COUNT", "TTL", "FIRST SEEN", "LAST SEEN", "INSTANCE", "DETAIL")


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
    _add_providers(commands)
    gateway_cli.add_parser(commands)
    add_state_parser(commands)
    return parser


def _add_providers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    providers = commands.add_parser(
        "providers", help="the provider blacklist shared through Redis (see docs/redis.md)"
    )
    providers.add_argument("--redis-url", help="Redis URL (env KINFERENCE_REDIS_URL)")
    providers.add_argument("--prefix", help="key prefix (env KINFERENCE_REDIS_PREFIX)")
    actions = providers.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="blacklisted providers, why, and for how long")
    listing.add_argument("--json", action="store_true", help="one JSON array, for scripts")
    clear = actions.add_parser("clear", help="lift the blacklisting on every replica")
    which = clear.add_mutually_exclusive_group(required=True)
    which.add_argument("provider", nargs="?", help="NAMESPACE/NAME")
    which.add_argument("--all", action="store_true", help="every blacklisted provider")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "check-config":
            return _check_config(args.file)
        if args.command == "gateway":
            return gateway_cli.run(args)
        if args.command == "state":
            return run_state(args)
        if args.command == "providers":
            return _providers(args)
        settings = load_settings({"config": args.config, "listen": args.listen})
        policy = load_policy(settings.config) if settings.config else default_policy()
        check_discovery(settings)
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


def _providers(args: argparse.Namespace) -> int:
    settings = load_settings({"redis_url": args.redis_url, "redis_prefix": args.prefix})
    if not settings.redis_url:
        raise SettingsError(
            "KINFERENCE_REDIS_URL is empty: the provider blacklist lives in Redis "
            "(set it or pass --redis-url)"
        )
    if args.action == "clear" and args.provider is not None:
        namespace, _, name = args.provider.partition("/")
        if not namespace or not name or "/" in name:
            raise SettingsError(f"expected a provider as NAMESPACE/NAME, got {args.provider!r}")
    try:
        return asyncio.run(_providers_command(args, settings))
    except (RedisError, OSError) as exc:
        print(f"kinference: error: Redis: {exc}", file=sys.stderr)
        return EXIT_FAILED


async def _providers_command(args: argparse.Namespace, settings: Settings) -> int:
    timeout = settings.redis_timeout_s
    timeouts = Timeouts(connect_s=timeout, command_s=timeout)
    redis = connect(settings.redis_url, timeouts, tls=settings.redis_tls())
    keys = Keys(settings.redis_prefix)
    try:
        if args.action == "list":
            _print_entries(await list_blacklist(redis, keys), as_json=args.json)
            return 0
        provider = None if args.all else args.provider
        deleted = await clear_blacklist(redis, keys, provider)
    finally:
        await redis.aclose()
    if provider is not None and not deleted:
        print(f"{provider} was not blacklisted")
    else:
        what = provider or f"{deleted} provider{'s' if deleted != 1 else ''}"
        print(f"cleared {what}; every replica lifts it within 1 s")
    return 0


def _print_entries(entries: list[Entry], *, as_json: bool) -> None:
    if as_json:
        print(json.dumps([dataclasses.asdict(entry) for entry in entries], indent=2))
        return
    if not entries:
        print("no provider is blacklisted")
        return
    rows = [_TABLE, *(_row(entry) for entry in entries)]
    widths = [max(len(row[column]) for row in rows) for column in range(len(_TABLE) - 1)]
    for row in rows:  # the detail, last and longest, is not padded
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
        print("  ".join([*cells, row[-1]]).rstrip())


def _row(entry: Entry) -> tuple[str, ...]:
    ttl = ttl_text(entry.ttl_ms)
    return (entry.provider, entry.reason, str(entry.count), ttl, entry.first_seen,
            entry.last_seen, entry.instance, entry.detail)  # fmt: skip


def _configure_logging(settings: Settings) -> None:
    configure_logging(settings.log_level, settings.log_format, sys.stderr)


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
