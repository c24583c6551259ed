"""Prefix-cache hit rate of picker replicas behind connection-balanced callers, simulated engines.

    python -m loadtest.bench_cluster [--quick] [--replicas 4] [--requests N] [--seed S] [--strict]

One workload (`loadtest.workloads`: users of a few shared system prompts, and multi-turn
chats) runs three times against `kinference serve` subprocesses picking among 8 simulated
engines (`loadtest.engine_model`, one per pool endpoint; the endpoints are never dialled):

  (a) 1 replica;
  (b) N replicas sharing one Redis (KINFERENCE_REDIS_URL), flushed before the run;
  (c) N replicas, each on its own.

Callers are gateway instances, each holding one channel to one replica (round-robin), as a
Kubernetes Service balances connections. Turn t of session k goes through caller (k + t) mod
C, so consecutive turns of a conversation, and users of one system prompt, land on different
replicas; a turn starts once the previous turn of its session has finished. Per request:
PushBody, Pick, the picked engine admits the prompt (its cached prefix is the hit), PullBody,
ReportFirstToken after the simulated prefill, ReportFinalToken after the simulated decode
with prompt, completion and cached tokens. Simulated engine time is scaled down
(`--time-scale`) to keep the run short.

Hit rate = cached prompt tokens / prompt tokens over all requests. The engines' cache is
sized so that the 8 of them hold the live working set only if conversations stay on one
engine. Target: (b) reaches >= 0.95 of (a)'s hit rate. For (b), Redis commands per request
are read from INFO commandstats before and after the run (every command but INFO counts:
the replicas' background work included).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import math
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import redis
import uvloop

from kinference.client import PickerClient
from kinference.v1 import picker_pb2 as pb
from loadtest.engine_model import Admission, EngineModel, itl_buckets
from loadtest.flows import ACCEPTED_OUTCOMES, CLIENT_OPTIONS, FlowError
from loadtest.redis_server import RedisServer
from loadtest.servers import ServerProcess, ServerSpec, kinference_spec, spawn, stop, wait_ready
from loadtest.workloads import MODEL, Session, Turn, WorkloadSpec, request_count, workload

ENGINES = tuple(f"10.0.0.{i}:8000" for i in range(1, 9))
BLOCK_CHARS = 64  # the engines' block and the picker's prefix block alike
TARGET_RATIO = 0.95
IDLE_S = 1.0  # seconds of no traffic over which the replicas' background Redis rate is read
# Each caller's channel gets its own connection (gRPC shares subchannels between channels
# with equal arguments otherwise), like separate gateway processes.
CALLER_OPTIONS = [*CLIENT_OPTIONS, ("grpc.use_local_subchannel_pool", 1)]
REPLICA_ENV = {"KINFERENCE_METRICS_LISTEN": "", "KINFERENCE_SHUTDOWN_GRACE_S": "1"}


@dataclass(frozen=True)
class Plan:
    label: str
    replicas: int
    requests: int
    seed: int
    callers: int  # gateway instances, one channel each
    users: int  # sessions in flight at once
    time_scale: float  # real seconds per simulated engine second
    capacity_blocks: int  # per engine; 0 = sized from the workload


@dataclass(frozen=True)
class Sample:
    """One request as the simulation saw it."""

    engine: str
    cached_tokens: int
    prompt_tokens: int
    pick_ms: float
    degraded: bool


@dataclass
class RunResult:
    config: str
    samples: list[Sample]
    seconds: float
    redis_calls: Counter[str] | None = None  # commands by name during the run
    redis_idle_per_s: float | None = None  # commands per second before the run, no traffic

    @property
    def hit_rate(self) -> float:
        prompt = sum(sample.prompt_tokens for sample in self.samples)
        return sum(sample.cached_tokens for sample in self.samples) / prompt if prompt else 0.0

    def pick_ms(self, quantile: float) -> float:
        ordered = sorted(sample.pick_ms for sample in self.samples)
        return ordered[min(int(quantile * len(ordered)), len(ordered) - 1)]

    @property
    def imbalance(self) -> float:
        """Requests of the busiest engine over the mean across all engines."""
        counts = Counter(sample.engine for sample in self.samples)
        return max(counts.values()) / (len(self.samples) / len(ENGINES))

    @property
    def degraded(self) -> int:
        return sum(sample.degraded for sample in self.samples)

    def redis_per_request(self) -> float | None:
        if self.redis_calls is None:
            return None
        return sum(self.redis_calls.values()) / len(self.samples)


def hit_rate(samples: Sequence[Sample]) -> float:
    return RunResult("", list(samples), 0.0).hit_rate


# --- the policy and the replicas ------------------------------------------------------------


def policy_yaml(capacity_blocks: int) -> str:
    """8 static endpoints, no engine scrapes; the picker remembers what an engine can hold."""
    endpoints = ", ".join(f'"{endpoint}"' for endpoint in ENGINES)
    return f"""\
pools:
  - namespace: default
    name: chat
    endpoints: [{endpoints}]
    models: ["{MODEL}"]
routing:
  prefix:
    block_bytes: {BLOCK_CHARS}
    max_blocks: 512
    lru_blocks_per_worker: {capacity_blocks}
"""


def replica_spec(config: Path, index: int, redis_url: str) -> ServerSpec:
    spec = kinference_spec(config)
    env = {**REPLICA_ENV, "KINFERENCE_REDIS_URL": redis_url}
    return dataclasses.replace(spec, label=f"kinference-r{index}", env=env)


@contextlib.asynccontextmanager
async def replicas_running(
    specs: Sequence[ServerSpec], log_dir: Path
) -> AsyncIterator[list[ServerProcess]]:
    """Started and SERVING replicas (started in parallel); stopped on exit."""
    servers = [spawn(spec, log_dir) for spec in specs]
    try:
        started = time.perf_counter()
        await asyncio.gather(*(wait_ready(server) for server in servers))
        log(f"replicas SERVING in {time.perf_counter() - started:.1f} s")
        yield servers
    except BaseException:
        for server in servers:
            print(f"\n--- {server.spec.label} output ---\n{server.log_tail()}", file=sys.stderr)
        raise
    finally:
        stopping = time.perf_counter()
        for server in servers:
            if server.process.poll() is None:
                server.process.terminate()
        for server in servers:
            stop(server)
        log(f"replicas stopped in {time.perf_counter() - stopping:.1f} s")


# --- the simulation ------------------------------------------------------------------------


class Simulation:
    """Callers, engines and the per-request flow of one run."""

    def __init__(self, callers: list[PickerClient], plan: Plan, capacity_blocks: int) -> None:
        self.callers = callers
        self.plan = plan
        self.engines = {
            endpoint: EngineModel(capacity_blocks, BLOCK_CHARS, seed=plan.seed * 100 + i)
            for i, endpoint in enumerate(ENGINES)
        }
        self.samples: list[Sample] = []

    async def run(self, sessions: list[Session]) -> list[Sample]:
        queue = iter(sessions)  # shared: each user takes the next session when free
        users = [asyncio.create_task(self._user(queue)) for _ in range(self.plan.users)]
        try:
            await asyncio.gather(*users)
        finally:
            for task in users:
                task.cancel()
            await asyncio.gather(*users, return_exceptions=True)
        return self.samples

    async def _user(self, queue: Iterator[Session]) -> None:
        for session in queue:
            for turn in session.turns:  # in order, each after the previous one finished
                self.samples.append(await self.request(turn))

    def caller_for(self, turn: Turn) -> PickerClient:
        return self.callers[(turn.session + turn.turn) % len(self.callers)]

    async def request(self, turn: Turn) -> Sample:
        client = self.caller_for(turn)
        body = turn.body()
        pushed = await client.push(body.chunks, declared_length=body.length)
        started = time.perf_counter()
        picked = await client.pick(pushed.stream_id, tenant="")
        pick_ms = (time.perf_counter() - started) * 1000.0
        engine = self._engine_of(picked)
        pulled = await client.pull_all(picked.response_id)
        if len(pulled) != picked.body_total_bytes:
            raise FlowError(f"PullBody sent {len(pulled)} bytes of {picked.body_total_bytes}")
        admission = await self._serve(client, picked.response_id, self.engines[engine], turn)
        degraded = picked.outcome == pb.PickResponse.DEGRADED
        return Sample(engine, admission.cached_tokens, admission.prompt_tokens, pick_ms, degraded)

    def _engine_of(self, picked: pb.PickResponse) -> str:
        if picked.outcome not in ACCEPTED_OUTCOMES or picked.WhichOneof("destination") != "local":
            outcome = pb.PickResponse.Outcome.Name(picked.outcome)
            raise FlowError(f"Pick answered {outcome} without a local target: {picked.reason!r}")
        if picked.local.endpoint not in self.engines:
            raise FlowError(f"Pick chose an unknown endpoint {picked.local.endpoint!r}")
        return str(picked.local.endpoint)

    async def _serve(
        self, client: PickerClient, response_id: int, engine: EngineModel, turn: Turn
    ) -> Admission:
        """The engine's part: admit, prefill, first token, decode, final report."""
        admission = engine.admit(turn.prompt, turn.completion)
        engine.running += 1
        try:
            prefill_s = engine.prefill_s(admission.uncached_tokens)
            await asyncio.sleep(prefill_s * self.plan.time_scale)
            await client.first_token(response_id, ttft_ms=round(prefill_s * 1000))
            gap_s = engine.decode_gap_s()
            await asyncio.sleep(engine.decode_s(turn.completion_tokens) * self.plan.time_scale)
        finally:
            engine.running -= 1
        await client.final_token(
            response_id,
            model=MODEL,
            prompt_tokens=admission.prompt_tokens,
            completion_tokens=turn.completion_tokens,
            cached_tokens=admission.cached_tokens,
            itl_bucket_counts=itl_buckets(gap_s, turn.completion_tokens),
        )
        return admission


# --- one configuration ---------------------------------------------------------------------


def redis_calls(client: redis.Redis) -> Counter[str]:
    """Calls per command name since the server started, INFO itself left out."""
    stats = client.info("commandstats")
    calls = Counter(
        {name.removeprefix("cmdstat_"): int(row["calls"]) for name, row in stats.items()}
    )
    del calls["info"]
    return calls


@dataclass(frozen=True)
class RunContext:
    """What every configuration shares: the plan, the workload, the engine size, files."""

    plan: Plan
    sessions: list[Session]
    capacity_blocks: int
    policy: Path
    log_dir: Path


async def run_config(
    config: str, replicas: int, redis_server: RedisServer | None, context: RunContext
) -> RunResult:
    """Start `replicas` replicas (sharing a flushed `redis_server` when given), run the load."""
    redis_url = redis_server.url if redis_server else ""
    specs = [replica_spec(context.policy, i, redis_url) for i in range(replicas)]
    monitor = redis.Redis(port=redis_server.port) if redis_server else None
    log(f"{config}: starting {replicas} replica(s)")
    try:
        if monitor is not None:
            monitor.flushall()
        async with replicas_running(specs, context.log_dir) as servers:
            addresses = [servers[i % replicas].address for i in range(context.plan.callers)]
            result = await measure(config, addresses, monitor, context)
    finally:
        if monitor is not None:
            monitor.close()
    log(f"{config}: {len(result.samples)} requests in {result.seconds:.1f} s")
    return result


async def measure(
    config: str, addresses: list[str], monitor: redis.Redis | None, context: RunContext
) -> RunResult:
    """The workload through one caller per address; Redis calls counted around it."""
    callers = [PickerClient(address, options=CALLER_OPTIONS) for address in addresses]
    try:
        idle = await idle_calls(monitor) if monitor is not None else None
        before = redis_calls(monitor) if monitor is not None else Counter[str]()
        started = time.perf_counter()
        simulation = Simulation(callers, context.plan, context.capacity_blocks)
        samples = await simulation.run(context.sessions)
        seconds = time.perf_counter() - started
        calls = redis_calls(monitor) - before if monitor is not None else None
    finally:
        await asyncio.gather(*(caller.close() for caller in callers))
    return RunResult(config, samples, seconds, calls, idle)


async def idle_calls(monitor: redis.Redis) -> float:
    """Commands per second the replicas send with no traffic (polls, heartbeats)."""
    before = redis_calls(monitor)
    await asyncio.sleep(IDLE_S)
    return sum((redis_calls(monitor) - before).values()) / IDLE_S


def sized_capacity(sessions: list[Session], plan: Plan) -> int:
    """Blocks per engine: room for twice an engine's share of the live working set.

    The live set is what the sessions in flight have built (each session's longest prompt
    plus reply, on average, times the users), shared out over the engines, plus every system
    prompt on every engine. Spread at random, each engine would need the whole live set.
    """
    if plan.capacity_blocks:
        return plan.capacity_blocks
    last = [session.turns[-1] for session in sessions]
    mean_blocks = statistics.fmean(len(turn.prompt + turn.completion) for turn in last)
    mean_blocks /= BLOCK_CHARS
    systems = {session.system: session.turns[0].messages[0][1] for session in sessions}
    system_blocks = sum(len(text) for text in systems.values()) / BLOCK_CHARS
    return math.ceil(2 * plan.users * mean_blocks / len(ENGINES) + system_blocks)


# --- report --------------------------------------------------------------------------------


def render(results: list[RunResult], baseline: RunResult) -> str:
    header = (
        "config", "requests", "hit rate", "vs 1 replica", "pick p50 ms", "pick p99 ms",
        "engine imbalance (max/mean)", "DEGRADED picks", "Redis cmds/request", "run s",
    )  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for result in results:
        per_request = result.redis_per_request()
        cells = (
            result.config,
            str(len(result.samples)),
            f"{result.hit_rate:.3f}",
            f"{result.hit_rate / baseline.hit_rate:.3f}" if baseline.hit_rate else "-",
            f"{result.pick_ms(0.50):.2f}",
            f"{result.pick_ms(0.99):.2f}",
            f"{result.imbalance:.2f}",
            str(result.degraded),
            f"{per_request:.2f}" if per_request is not None else "-",
            f"{result.seconds:.1f}",
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def redis_breakdown(result: RunResult) -> str:
    if not result.redis_calls:
        return f"{result.config}: no Redis commands during the run"
    requests = len(result.samples)
    top = ", ".join(
        f"{name} {count / requests:.2f}" for name, count in result.redis_calls.most_common(8)
    )
    idle = result.redis_idle_per_s
    background = f"; with no traffic: {idle:.1f} commands/s" if idle is not None else ""
    return f"{result.config}: Redis commands per request by name: {top}{background}"


def verdict(shared: RunResult, baseline: RunResult) -> tuple[bool, str]:
    ratio = shared.hit_rate / baseline.hit_rate if baseline.hit_rate else 0.0
    passed = ratio >= TARGET_RATIO
    word = "PASS" if passed else "FAIL"
    return passed, f"{word}: {shared.config} reaches {ratio:.3f} of 1 replica's hit rate " + (
        f"(target >= {TARGET_RATIO})"
    )


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- main ----------------------------------------------------------------------------------


async def main_async(plan: Plan) -> bool:
    sessions = workload(WorkloadSpec.for_requests(plan.requests), plan.seed)
    capacity = sized_capacity(sessions, plan)
    log(
        f"workload: {len(sessions)} sessions, {request_count(sessions)} requests; "
        f"engine cache {capacity} blocks of {BLOCK_CHARS} chars x {len(ENGINES)} engines"
    )
    with tempfile.TemporaryDirectory(prefix="kinference-cluster-") as work:
        policy = Path(work) / "policy.yaml"
        policy.write_text(policy_yaml(capacity))
        context = RunContext(plan, sessions, capacity, policy, Path(work))
        redis_server = RedisServer().start()
        try:
            single = await run_config("(a) 1 replica", 1, None, context)
            n = plan.replicas
            shared = await run_config(f"(b) {n} replicas + Redis", n, redis_server, context)
            alone = await run_config(f"(c) {n} replicas, no Redis", n, None, context)
        finally:
            redis_server.stop()
    results = [single, shared, alone]
    passed, line = verdict(shared, single)
    print(f"### Cluster prefix-cache simulation ({plan.label}, seed {plan.seed})\n")
    print(render(results, single))
    print(f"\n{redis_breakdown(shared)}")
    print(
        f"\n{len(ENGINES)} engines x {capacity} blocks of {BLOCK_CHARS} chars; "
        f"{plan.callers} callers, {plan.users} users in flight, time scale {plan.time_scale}"
    )
    print(line)
    return passed


def plan_from(args: argparse.Namespace) -> Plan:
    requests = args.requests or (1500 if args.quick else 8000)
    return Plan(
        label="quick" if args.quick else "full",
        replicas=args.replicas,
        requests=requests,
        seed=args.seed,
        callers=args.callers,
        users=args.users,
        time_scale=args.time_scale,
        capacity_blocks=args.capacity_blocks,
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller workload (~1 min)")
    parser.add_argument("--replicas", type=int, default=4, help="N for runs (b) and (c)")
    parser.add_argument("--requests", type=int, default=0, help="about this many per run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--callers", type=int, default=16, help="channels, round-robin")
    parser.add_argument("--users", type=int, default=48, help="sessions in flight")
    parser.add_argument("--time-scale", type=float, default=0.05, help="real s per engine s")
    parser.add_argument("--capacity-blocks", type=int, default=0, help="0: from the workload")
    parser.add_argument("--strict", action="store_true", help="exit 1 when the target fails")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    passed = uvloop.run(main_async(plan_from(args)))
    return 1 if args.strict and not passed else 0


if __name__ == "__main__":
    sys.exit(main())
