"""h199 scratch probe: one fault at a time against two replicas over a real redis-server."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from collections import Counter

import pytest
import redis as sync_redis

from kinference.v1 import picker_pb2 as pb
from loadtest.redis_server import RedisServer, free_port
from tests.api.helpers import chat_body, push, wait_until
from tests.cluster.conftest import CLUSTER_POLICY
from tests.cluster.test_replication import load, total

POLICY = CLUSTER_POLICY + "tenants:\n  - {tenant: team-a, tokens_per_minute: 100000000}\n"
FAULT = os.environ.get("FAULT", "oom1mb")
HOLD_S = float(os.environ.get("HOLD_S", "6"))


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[float, str, int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((time.monotonic(), record.name, record.levelno, record.getMessage()))


def faults(server: RedisServer):
    cli = server.cli
    dead = str(free_port())
    gone = os.path.join(server.directory, "gone")

    def misconf_on():
        os.makedirs(gone, exist_ok=True)
        cli("CONFIG", "SET", "save", "3600 1")
        # dir is protected in 7.0 (enable-protected-configs); started with it
        cli("CONFIG", "SET", "dir", gone)
        shutil.rmtree(gone)
        cli("BGSAVE")
        deadline = time.monotonic() + 5
        while "rdb_last_bgsave_status:err" not in cli("INFO", "persistence") if False else True:
            info = sync_redis.Redis(port=server.port).info("persistence")
            if info["rdb_last_bgsave_status"] == "err" and not info["rdb_bgsave_in_progress"]:
                break
            assert time.monotonic() < deadline
            time.sleep(0.01)

    def misconf_off():
        os.makedirs(gone, exist_ok=True)
        cli("CONFIG", "SET", "dir", gone)
        cli("BGSAVE")
        deadline = time.monotonic() + 5
        while True:
            info = sync_redis.Redis(port=server.port).info("persistence")
            if info["rdb_last_bgsave_status"] == "ok" and not info["rdb_bgsave_in_progress"]:
                break
            assert time.monotonic() < deadline
            time.sleep(0.01)

    def auth_on():
        cli("CONFIG", "SET", "requirepass", "sesame")
        c = sync_redis.Redis(port=server.port, password="sesame")
        c.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        c.close()

    def auth_off():
        c = sync_redis.Redis(port=server.port, password="sesame")
        c.execute_command("CONFIG", "SET", "requirepass", "")
        c.close()

    admin = sync_redis.Redis(port=server.port, single_connection_client=True)
    admin.ping()

    def maxclients_on():
        admin.execute_command("CONFIG", "SET", "maxclients", "2")
        admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")

    return {
        "oom1mb": (
            lambda: cli("CONFIG", "SET", "maxmemory", "1mb"),
            lambda: cli("CONFIG", "SET", "maxmemory", "0"),
        ),
        "oom": (
            lambda: cli("CONFIG", "SET", "maxmemory", "1"),
            lambda: cli("CONFIG", "SET", "maxmemory", "0"),
        ),
        "noreplicas": (
            lambda: cli("CONFIG", "SET", "min-replicas-to-write", "1"),
            lambda: cli("CONFIG", "SET", "min-replicas-to-write", "0"),
        ),
        "readonly": (
            lambda: cli("REPLICAOF", "127.0.0.1", dead),
            lambda: cli("REPLICAOF", "NO", "ONE"),
        ),
        "misconf": (misconf_on, misconf_off),
        "auth": (auth_on, auth_off),
        "maxclients": (
            maxclients_on,
            lambda: admin.execute_command("CONFIG", "SET", "maxclients", "10000"),
        ),
        "pausewrite": (
            lambda: cli("CLIENT", "PAUSE", str(int(HOLD_S * 1000)), "WRITE"),
            lambda: cli("CLIENT", "UNPAUSE"),
        ),
        "flushall": (lambda: cli("FLUSHALL"), lambda: "ok"),
        "xadd-acl": (
            lambda: cli("ACL", "SETUSER", "default", "-xadd"),
            lambda: cli("ACL", "SETUSER", "default", "+xadd"),
        ),
        "events-junk": (
            lambda: (cli("DEL", "{kinference}:events"), cli("SET", "{kinference}:events", "junk")),
            lambda: cli("DEL", "{kinference}:events"),
        ),
    }


@pytest.fixture
def redis_server():
    server = RedisServer(
        extra_args=("--enable-protected-configs", "yes", "--enable-debug-command", "yes")
    ).start()
    yield server
    server.stop()


async def test_probe(redis_server: RedisServer, start_replicas) -> None:
    handler = Lines()
    root = logging.getLogger("kinference")
    root.setLevel(logging.INFO)
    root.addHandler(handler)
    redis_server.cli("CONFIG", "SET", "maxmemory-policy", "noeviction")
    a, b = await start_replicas(2, POLICY)
    await wait_until(lambda: a.app.cluster.connected and b.app.cluster.connected, 10)
    stop = asyncio.Event()
    lat: list[tuple[float, float, int, str]] = []
    gauge: list[tuple[float, float, float]] = []

    async def caller(n: int) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            pushed = await push(a, chat_body(content=f"c{n} {i} " + "x" * 200))
            t0 = time.monotonic()
            pick = await a.client.pick(pushed.stream_id, tenant="team-a")
            lat.append((t0, time.monotonic() - t0, int(pick.outcome), pick.reason))
            if pick.response_id:
                await a.client.first_token(pick.response_id, 100)
                await a.client.final_token(pick.response_id, prompt_tokens=30, completion_tokens=7)

    lags: list[tuple[float, float]] = []

    async def ticker() -> None:
        while not stop.is_set():
            t = time.monotonic()
            await asyncio.sleep(0.005)
            lags.append((t, time.monotonic() - t - 0.005))

    async def sampler() -> None:
        while not stop.is_set():
            gauge.append(
                (
                    time.monotonic(),
                    a.metric("kinference_redis_connected"),
                    a.metric("kinference_cluster_outbox_events"),
                )
            )
            await asyncio.sleep(0.1)

    if os.environ.get("SLOW"):
        loop = asyncio.get_running_loop()
        loop.set_debug(True)
        loop.slow_callback_duration = float(os.environ["SLOW"])
        logging.getLogger("asyncio").addHandler(handler)
    long_runs: list[tuple[float, float, float, str]] = []
    if os.environ.get("LONG"):
        import asyncio.events as ev

        orig = ev.Handle._run

        def _run(self):
            t = time.monotonic()
            c = time.thread_time()
            orig(self)
            d = time.monotonic() - t
            if d > 0.03:
                task = getattr(self._callback, "__self__", None)
                what = repr(self)[:120]
                if isinstance(task, asyncio.Task):
                    what = f"{task.get_name()} {task.get_coro()!r}"[:250]
                long_runs.append((t, d, time.thread_time() - c, what))

        ev.Handle._run = _run
    tasks = [asyncio.create_task(caller(n)) for n in range(4)] + [
        asyncio.create_task(sampler()),
        asyncio.create_task(ticker()),
    ]
    await asyncio.sleep(1.0)
    refuse, restore = faults(redis_server)[FAULT]
    handler.lines.clear()
    t_fault = time.monotonic()
    await asyncio.to_thread(refuse)
    await asyncio.sleep(HOLD_S)
    t_restore = time.monotonic()
    await asyncio.to_thread(restore)
    ok = await asyncio.to_thread(lambda: None)
    t_end = t_restore + 8
    while time.monotonic() < t_end:
        if a.app.cluster.gap() is None and b.app.cluster.gap() is None:
            break
        await asyncio.sleep(0.05)
    caught = time.monotonic() - t_restore
    await asyncio.sleep(1.5)
    stop.set()
    await asyncio.gather(*tasks)
    during = [x for x in lat if t_fault <= x[0] < t_restore]
    after = [x for x in lat if x[0] >= t_restore + caught + 0.5]
    before = [x for x in lat if x[0] < t_fault]
    print(f"\nbefore: {len(before)} picks, max {max(x[1] for x in before) * 1000:.1f} ms")
    print(
        f"FAULT {FAULT}: picks during {len(during)}, max latency {max((x[1] for x in during), default=0) * 1000:.1f} ms"
    )
    print(
        "loop lag max before",
        round(max(l for t, l in lags if t < t_fault) * 1000, 1),
        "during",
        round(max(l for t, l in lags if t_fault <= t < t_restore) * 1000, 1),
        "ms",
    )
    slow = sorted(during, key=lambda x: -x[1])[:5]
    print("slowest during", [(round(x[0] - t_fault, 2), round(x[1] * 1000), x[2]) for x in slow])
    print("outcomes during", Counter(x[2] for x in during))
    print("reasons during", Counter((x[3] or "")[:140] for x in during).most_common(4))
    print(
        "outcomes after",
        Counter(x[2] for x in after),
        "caught up in",
        round(caught, 2),
        "s; gaps",
        a.app.cluster.gap(),
        b.app.cluster.gap(),
    )
    g = [(round(t - t_fault, 1), c, o) for t, c, o in gauge if t >= t_fault]
    flips = sum(1 for i in range(1, len(g)) if g[i][1] != g[i - 1][1])
    print(
        "gauge flips",
        flips,
        "samples",
        [(t, c) for t, c, o in g][:3],
        "... max outbox",
        max(o for _, _, o in g),
    )
    print("log lines", len(handler.lines))
    for t, d, c, r in long_runs:
        print("   LONG", round(t - t_fault, 2), "wall", round(d * 1000), "cpu", round(c * 1000), r)
    for t, n, lv, m in handler.lines:
        if n == "asyncio":
            print("   SLOW", round(t - t_fault, 2), m[:300])
    for line in Counter((n, lv, m[:150]) for _, n, lv, m in handler.lines).most_common(12):
        print("  ", line)
    await asyncio.sleep(0.5)
    print("load a", load(a), "load b", load(b), "total b", total(b))
