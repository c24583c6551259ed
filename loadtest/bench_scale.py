"""Redis and replica cost of the shared state as the fleet grows: measured, fitted, extrapolated.

    python -m loadtest.bench_scale [--quick] [--seconds S] [--seed N]

Starts a real three-master Redis Cluster on loopback (`loadtest.redis_server`), then, per
point (R replicas, Q requests/s, P pools), R replicas of kinference's own cluster layer in a
few processes (`loadtest.scale_worker`: `ClusterNode` with per-pool shards, driven through
`InFlight` at a Poisson rate; one replica is a probe taking no traffic). Over a measured
window it reads, per master, INFO's CPU seconds, commands and network bytes, and from the
probe its process CPU (what following the others costs one replica) and the propagation
delay of every pick (creation on one replica to applied on the probe).

The paper model (`loadtest.scale_model`, docs/scaling.md) is then calibrated on the points:
Redis CPU per command and per byte (least squares over masters and points), a replica's CPU
per request it follows, and the delay beyond the batch window; it prints its fit on each
point and its extrapolation to 100 replicas x 2 000 requests/s on 3 masters against the
targets (no master above 50 % of a core, a replica's apply CPU <= 10 % of a core,
propagation p99 <= 50 ms).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import redis

from loadtest.redis_server import RedisClusterServers
from loadtest.scale_model import Calibration, Prediction, Scenario, predict
from loadtest.scale_worker import Job, Schedule

WARMUP_S = 2.0  # seconds of traffic before the window opens
PROCESSES = 3  # worker processes carrying the loaded replicas (plus one for the probe)
TARGET_NODE_CPU = 0.5
TARGET_APPLY_CPU = 0.10
TARGET_P99_MS = 50.0
SMOKE_POINTS = ((3, 60, 3),)  # for the test suite: proves the pipeline, measures nothing
QUICK_POINTS = ((4, 100, 6), (8, 200, 6))
FULL_POINTS = ((4, 100, 6), (6, 150, 6), (8, 200, 6), (8, 300, 12), (12, 300, 12))
TARGETS = (
    Scenario(100, 2000, 12),
    Scenario(100, 2000, 48),
    Scenario(100, 2000, 48, pools_per_replica=12),
)


@dataclass
class Point:
    scenario: Scenario
    seconds: float
    node_cpu: list[float]  # share of a core per master
    node_ops: list[float]
    node_trips: list[float]
    node_bytes: list[float]
    probe_cpu: float  # share of a core
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    applied_events: int
    fleet_cpu: float  # cores the simulated replicas used (loaded ones and the probe)
    load_avg: float  # the machine's 1-minute load average at the window's end


def node_counters(client: redis.Redis) -> tuple[float, float, float, float]:
    """CPU seconds, commands, round trips (read events), bytes in + out, since start."""
    cpu, stats = client.info("cpu"), client.info("stats")
    return (
        float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]),
        float(stats["total_commands_processed"]),
        float(stats["total_reads_processed"]),
        float(stats["total_net_input_bytes"]) + float(stats["total_net_output_bytes"]),
    )


def spawn(job: Job) -> subprocess.Popen[str]:
    payload = json.dumps(job.__dict__)
    return subprocess.Popen(
        [sys.executable, "-m", "loadtest.scale_worker", payload],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def schedule_when_ready(workers: list[subprocess.Popen[str]], seconds: float) -> Schedule:
    """Wait for every worker's `ready` (its replicas started), then send them all one
    schedule: traffic from now (plus a moment for the line to arrive), WARMUP_S of it, then
    the measured window of `seconds`."""
    for worker in workers:
        assert worker.stdout is not None
        line = worker.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"a scale worker did not start (exit {worker.wait()}): {line!r}")
    start = time.time() + 0.2
    schedule = Schedule(start, start + WARMUP_S, start + WARMUP_S + seconds)
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.write(json.dumps(schedule.__dict__) + "\n")
        worker.stdin.flush()
    return schedule


def run_point(cluster: RedisClusterServers, scenario: Scenario, seconds: float, seed: int) -> Point:
    clients = [redis.Redis(port=node.port) for node in cluster.nodes]
    for client in clients:
        client.flushall()
    loaded = scenario.replicas - 1
    processes = min(PROCESSES, loaded)
    jobs = [
        Job(cluster.url, loaded // processes + (1 if i < loaded % processes else 0),
            scenario.rate / processes, scenario.pools, seed=seed + i)
        for i in range(processes)
    ]  # fmt: skip
    jobs.append(Job(cluster.url, 1, 0.0, scenario.pools, True, seed))
    workers = [spawn(job) for job in jobs]
    schedule = schedule_when_ready(workers, seconds)
    measure, end = schedule.measure_at, schedule.end_at
    while time.time() < measure:
        time.sleep(0.01)  # waiting for the window, bounded by its start
    before = [node_counters(c) for c in clients]
    while time.time() < end:
        time.sleep(0.01)
    after = [node_counters(c) for c in clients]
    outputs = [json.loads(w.communicate(timeout=120)[0]) for w in workers]
    for client in clients:
        client.close()
    probe = outputs[-1]
    delays = np.array(probe["delays_ms"]) if probe["delays_ms"] else np.array([float("nan")])
    deltas = [
        [a - b for a, b in zip(x, y, strict=True)] for x, y in zip(after, before, strict=True)
    ]
    return Point(
        scenario,
        seconds,
        [d[0] / seconds for d in deltas],
        [d[1] / seconds for d in deltas],
        [d[2] / seconds for d in deltas],
        [d[3] / seconds for d in deltas],
        probe["cpu_s"] / seconds,
        sum(o["requests"] for o in outputs) / (seconds + WARMUP_S),
        float(np.percentile(delays, 50)),
        float(np.percentile(delays, 99)),
        int(probe["events"]),
        sum(o["cpu_s"] for o in outputs) / seconds,
        os.getloadavg()[0],
    )


def calibrate(points: list[Point], idle_cpu: float) -> Calibration:
    """Least squares: Redis CPU ~ round trips, commands and bytes per master (a column that
    comes out negative, collinear on these points, is dropped); apply CPU ~ requests
    followed."""
    rows, cpu = [], []
    for p in points:
        for t, o, b, c in zip(p.node_trips, p.node_ops, p.node_bytes, p.node_cpu, strict=True):
            rows.append([t, o, b])
            cpu.append(c)
    costs = fit_nonnegative(np.array(rows), np.array(cpu))
    followed = np.array([followed_per_s(p) for p in points])
    extra = np.array([p.probe_cpu - idle_cpu for p in points])
    followed_sq = float(np.sum(followed * followed))
    # No request followed (a starved host may finish none in a smoke run): nothing to fit.
    per_request = float(np.sum(followed * extra)) / followed_sq if followed_sq > 0 else 0.0
    structural = 1000 * 0.030
    # The least disturbed point: on a shared 2-core machine the others add scheduling delay.
    delay_extra = max(0.0, min(p.p99_ms - structural for p in points))
    return Calibration(*costs, idle_cpu, max(per_request, 0.0), delay_extra)


def fit_nonnegative(x: Any, y: Any) -> list[float]:
    columns = list(range(x.shape[1]))
    while columns:
        solution, *_ = np.linalg.lstsq(x[:, columns], y, rcond=None)
        if all(v >= 0 for v in solution):
            costs = [0.0] * x.shape[1]
            for column, value in zip(columns, solution, strict=True):
                costs[column] = float(value)
            return costs
        columns.pop(int(np.argmin(solution)))
    return [0.0] * x.shape[1]


def followed_per_s(p: Point) -> float:
    """Requests of the others per second that the probe follows (it reads every pool)."""
    return p.requests_per_s


def idle_probe(cluster: RedisClusterServers, seconds: float, seed: int) -> float:
    """The probe's CPU share with 1 other replica and no traffic: background loops only."""
    return run_point(cluster, Scenario(2, 0.0, 6), seconds, seed).probe_cpu


def pct(value: float) -> str:
    return f"{100 * value:.1f} %"


def render_points(points: list[Point], calibration: Calibration) -> str:
    head = "| R | Q req/s | P | max master CPU (model) | commands/s per master"
    head += " | round trips/s per master | bytes/s per master"
    head += " | probe apply CPU (model) | propagation p50 / p99 ms (model p99)"
    head += " | replicas' CPU, cores | load avg |"
    lines = [head, "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for p in points:
        s = Scenario(p.scenario.replicas, p.requests_per_s, p.scenario.pools)
        model = predict(s, calibration)
        trips = " / ".join(f"{t:.0f}" for t in p.node_trips)
        lines.append(
            f"| {s.replicas} | {p.requests_per_s:.0f} | {s.pools} "
            f"| {pct(max(p.node_cpu))} ({pct(max(model.node_cpu))}) "
            f"| {' / '.join(f'{o:.0f}' for o in p.node_ops)} | {trips} "
            f"| {' / '.join(f'{b / 1e6:.2f} MB' for b in p.node_bytes)} "
            f"| {pct(p.probe_cpu)} ({pct(model.apply_cpu)}) "
            f"| {p.p50_ms:.1f} / {p.p99_ms:.1f} ({model.propagation_p99_ms:.1f}) "
            f"| {p.fleet_cpu:.2f} | {p.load_avg:.1f} |"
        )
    return "\n".join(lines)


def render_targets(calibration: Calibration) -> str:
    lines = [
        "| scenario | max master CPU | ops/s per master | MB/s per master | apply CPU | p99 ms"
        " | verdict |",
        "|---|--:|--:|--:|--:|--:|---|",
    ]  # fmt: skip
    for s in TARGETS:
        m: Prediction = predict(s, calibration)
        ok = (
            max(m.node_cpu) <= TARGET_NODE_CPU,
            m.apply_cpu <= TARGET_APPLY_CPU,
            m.propagation_p99_ms <= TARGET_P99_MS,
        )
        routed = f", {s.routed} pools per replica" if s.pools_per_replica else ""
        failed = [
            n for n, good in zip(("node CPU", "apply CPU", "p99"), ok, strict=True) if not good
        ]
        verdict = "PASS" if all(ok) else "FAIL: " + ", ".join(failed)
        lines.append(
            f"| {s.replicas} x {s.rate:.0f} req/s, {s.pools} pools{routed}, {s.masters} masters "
            f"| {pct(max(m.node_cpu))} | {' / '.join(f'{o:.0f}' for o in m.node_ops)} "
            f"| {' / '.join(f'{b / 1e6:.1f}' for b in m.node_bytes)} | {pct(m.apply_cpu)} "
            f"| {m.propagation_p99_ms:.0f} | {verdict} |"
        )
    return "\n".join(lines)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two small points (~40 s)")
    parser.add_argument("--seconds", type=float, default=0.0, help="measured window per point")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="one tiny point, no idle probe")
    args = parser.parse_args(argv)
    seconds = args.seconds or (1.0 if args.smoke else 4.0 if args.quick else 10.0)
    shapes = SMOKE_POINTS if args.smoke else QUICK_POINTS if args.quick else FULL_POINTS
    cluster = RedisClusterServers().start()
    try:
        idle = 0.0 if args.smoke else idle_probe(cluster, seconds, args.seed)
        log(f"idle probe: {pct(idle)} of a core")
        points = []
        for replicas, rate, pools in shapes:
            point = run_point(cluster, Scenario(replicas, rate, pools), seconds, args.seed)
            log(f"R={replicas} Q={rate} P={pools}: done")
            points.append(point)
    finally:
        cluster.stop()
    calibration = calibrate(points, idle)
    print(report(points, calibration, seconds, args))
    return 0


def capacity(points: list[Point], c: Calibration) -> str:
    """A node's capacity at the measured mix: round trips (with their commands and bytes)
    one core serves, from the busiest measured master."""
    p = max(points, key=lambda q: max(q.node_cpu))
    m = int(np.argmax(p.node_cpu))
    trips, commands, nbytes = p.node_trips[m], p.node_ops[m], p.node_bytes[m]
    per_trip = c.redis_s_per_trip + (
        c.redis_s_per_command * commands + c.redis_s_per_byte * nbytes
    ) / max(trips, 1)
    return (
        f"a master's capacity at the measured mix ~{1 / per_trip:.0f} round trips/s "
        f"({commands / max(trips, 1) * (1 / per_trip):.0f} commands/s) per core"
    )


def report(points: list[Point], c: Calibration, seconds: float, args: Any) -> str:
    label = "smoke" if args.smoke else "quick" if args.quick else "full"
    return "\n".join(
        [
            f"### Shared state at scale ({label}, {seconds:.0f} s windows, seed {args.seed}, "
            "3-master Redis Cluster on this machine)\n",
            render_points(points, c),
            "\nCalibration: Redis "
            f"{c.redis_s_per_trip * 1e6:.1f} us per round trip + "
            f"{c.redis_s_per_command * 1e6:.2f} us per command + "
            f"{c.redis_s_per_byte * 1e9:.2f} ns per byte; {capacity(points, c)}; "
            f"replica background {pct(c.apply_base)}, "
            f"{c.apply_s_per_request * 1e6:.0f} us CPU per request followed; propagation "
            f"p99 = 30 ms (batch + read pause) + {c.delay_extra_ms:.1f} ms (the least "
            "disturbed point's excess) + the apply time of one read.\n",
            "Extrapolated by the calibrated model (targets: master <= 50 % of a core, apply "
            "<= 10 % of a core, p99 <= 50 ms):\n",
            render_targets(c),
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
