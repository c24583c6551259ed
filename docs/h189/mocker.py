"""h189 scratch: `loadtest.bench_precise_mocker`'s precise mode only, with a probe in process:
per Pick the thread CPU and wall time of `Router.route`, the fresh queue replays in it
(`kvcache.pool.planned` calls) and, on the branch, the candidates `routing.settle` left
unsettled (replays skipped). Prints one JSON line (the run's figures).

    python docs/h189/mocker.py --rates 6 --duration 40 --seed 1
"""

import json
import statistics
import sys
import time

import uvloop

from kinference.kvcache import pool as P
from kinference.routing import router as RT
from kinference.routing import worker_choice as WC
from loadtest import bench_precise_mocker as B

cpu: list[float] = []
wall: list[float] = []
replays: list[int] = []
skipped: list[int] = []
current = {"replays": 0, "skipped": 0}

of_planned = P.planned


def planned(*args, **kwargs):
    current["replays"] += 1
    return of_planned(*args, **kwargs)


P.planned = planned

if hasattr(WC, "settle"):
    of_settle = WC.settle

    def settle(pipeline, ctx, guard):
        of_settle(pipeline, ctx, guard)
        if ctx.unsettled is not None:
            current["skipped"] += len(ctx.unsettled.positions)

    WC.settle = settle

of_route = RT.Router.route


def route(self, query):
    current["replays"] = current["skipped"] = 0
    c0, t0 = time.thread_time(), time.perf_counter()
    try:
        return of_route(self, query)
    finally:
        cpu.append((time.thread_time() - c0) * 1e3)
        wall.append((time.perf_counter() - t0) * 1e3)
        replays.append(current["replays"])
        skipped.append(current["skipped"])


RT.Router.route = route


def main() -> int:
    cli = B.argparse.ArgumentParser()
    cli.add_argument("--rates", default="6")
    cli.add_argument("--duration", type=float, default=40.0)
    cli.add_argument("--seed", type=int, default=1)
    cli.add_argument("--gpu-blocks", type=int, default=1024)
    cli.add_argument("--doc-chars", type=int, default=16_000)
    cli.add_argument("--dynamo", type=B.Path, default=B.Path("/tmp/dynamo-venv"))
    cli.add_argument("--model", type=B.Path, default=B.Path("/tmp/dynamo-model"))
    args = cli.parse_args()
    result = uvloop.run(B.run("precise", float(args.rates), args))
    n = len(cpu)
    print(
        json.dumps(
            {
                "kinference": P.__file__,
                "picks": n,
                "decision_cpu_ms_mean": sum(cpu) / n,
                "decision_cpu_ms_p50": statistics.median(cpu),
                "decision_wall_ms_mean": sum(wall) / n,
                "replays_per_pick": sum(replays) / n,
                "skipped_per_pick": sum(skipped) / n,
                "hit_rate": result.hit_rate,
                "ttft_p50_ms": result.ttft_p50_ms,
                "ttft_p90_ms": result.ttft_p90_ms,
                "requests": result.requests,
                "errors": result.errors,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
