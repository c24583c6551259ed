"""`kinference state [--redis-url URL] [--prefix P] [--json]`: the cluster view from Redis."""

from __future__ import annotations

import argparse
import asyncio
import sys

from redis.exceptions import RedisError

from kinference.cluster.connection import Timeouts, connect
from kinference.cluster.keys import Keys
from kinference.ops.state import read_state
from kinference.ops.table import render_json, render_text
from kinference.settings import Settings, SettingsError, load_settings

EXIT_FAILED = 1  # Redis unreachable


def add_state_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    state = commands.add_parser(
        "state", help="replicas, workers, blacklist and tenant usage, as shared through Redis"
    )
    state.add_argument("--redis-url", help="Redis URL (env KINFERENCE_REDIS_URL)")
    state.add_argument("--prefix", help="key prefix (env KINFERENCE_REDIS_PREFIX)")
    state.add_argument("--json", action="store_true", help="one JSON object, for scripts")


def run_state(args: argparse.Namespace) -> int:
    """Print the cluster view; 1 with one line on stderr when Redis does not answer.
    Raises SettingsError for a bad or missing setting."""
    settings = load_settings({"redis_url": args.redis_url, "redis_prefix": args.prefix})
    if not settings.redis_url:
        raise SettingsError(
            "KINFERENCE_REDIS_URL is empty: the cluster state lives in Redis "
            "(set it or pass --redis-url)"
        )
    try:
        output = asyncio.run(_read(settings, as_json=args.json))
    except (RedisError, OSError) as exc:
        print(f"kinference: error: Redis: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(output)
    return 0


async def _read(settings: Settings, *, as_json: bool) -> str:
    timeout = settings.redis_timeout_s
    timeouts = Timeouts(connect_s=timeout, command_s=timeout)
    redis = connect(settings.redis_url, timeouts, tls=settings.redis_tls())
    try:
        state = await read_state(redis, Keys(settings.redis_prefix))
    finally:
        await redis.aclose()
    return render_json(state) if as_json else render_text(state)
