"""Pick CPU and decisions on the routing benchmark's bodies, in process (h179).

    python docs/h179/pickcpu.py [--endpoints 4] [--rounds 5] [--requests 600] [--decisions F]
                                [--profile F.prof] [--json F]

`loadtest.bench_pick_replay`'s replay (a fresh App per round; push, Pick, one loop step,
readings every 4 Picks, reports 4 Picks later) at `--endpoints` endpoints (the Dynamo regime
runs 4 engines), plus: every Pick's chosen endpoint and reason code (`--decisions`: one line
per Pick per round, for parity between trees), and the Pick's own decision CPU measured
around `PickerService._decide` (thread CPU ns), beside the whole Pick's. `--profile` runs
one more round under cProfile (the Picks and their loop steps only).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import statistics
import sys
import time

_NOW = [1000.0]
READ = "--thrash-read" in sys.argv
_real_monotonic = time.monotonic
if "--real-clock" not in sys.argv:  # decisions depend on time: a clock that moves per Pick
    time.monotonic = lambda: _NOW[0]

import loadtest.bench_pick_replay as b  # noqa: E402
from kinference import service as S  # noqa: E402


def main() -> None:
    cli = argparse.ArgumentParser()
    cli.add_argument("--endpoints", type=int, default=4)
    cli.add_argument("--rounds", type=int, default=5)
    cli.add_argument("--requests", type=int, default=600)
    cli.add_argument("--warm", type=int, default=100)
    cli.add_argument("--seed", type=int, default=1)
    cli.add_argument("--decisions")
    cli.add_argument("--profile")
    cli.add_argument("--json")
    cli.add_argument("--real-clock", action="store_true")
    cli.add_argument("--thrash-read", action="store_true")
    cli.add_argument("--phases", action="store_true", help="docs/h179/phases.py's stamps")
    cli.add_argument(
        "--thrash-mb",
        type=int,
        default=0,
        help="write this many MB between Picks (caches cold, as in a gateway woken among other processes)",
    )
    args = cli.parse_args()
    b.ENDPOINTS = tuple(f"127.0.0.1:{9101 + i}" for i in range(args.endpoints))
    sys.path.insert(0, "docs/h179")
    import phases

    take = phases.install() if args.phases else None
    per_pick: list[dict[str, int]] = []
    decide_ns: list[int] = []
    chosen: list[str] = []
    of_decide = S.PickerService._decide

    def decide(self, *a, **k):  # type: ignore[no-untyped-def]
        _NOW[0] += 0.05  # 20 Picks a second of the router's clock
        t0 = time.thread_time_ns()
        result = of_decide(self, *a, **k)
        decide_ns.append(time.thread_time_ns() - t0)
        if take is not None:
            per_pick.append(take())
        dest = result.destination
        chosen.append(f"{getattr(dest, 'endpoint', dest)} {result.code.name}")
        return result

    S.PickerService._decide = decide
    import numpy as np

    if args.thrash_mb:
        thrash = np.zeros(args.thrash_mb << 17)  # float64: 8 B each
        from kinference.gateway import local as L

        of_push = L.LocalPicker.push

        async def push(self, *a, **k):  # type: ignore[no-untyped-def]
            thrash.sum() if READ else thrash.__iadd__(
                1.0
            )  # caches cold before the request comes in
            return await of_push(self, *a, **k)

        L.LocalPicker.push = push
    import random

    from kinference import app as A

    class Seeded(random.Random):  # the router's tie-breaks, the same every round
        def __init__(self, x=None):  # type: ignore[no-untyped-def]
            super().__init__(0 if x is None else x)

    A.random = type("R", (), {"Random": Seeded})  # only app.py's `random.Random()`
    bodies = b.bodies(args.requests, args.seed)
    rounds = []
    decisions = []
    for _ in range(args.rounds):
        _NOW[0] = 1000.0
        decide_ns.clear()
        chosen.clear()
        spent, after = asyncio.run(b.replay(bodies, args.warm))
        dec = [n / 1000 for n in decide_ns[args.warm :]]
        rounds.append(
            {
                "pick_median": statistics.median(spent),
                "pick_mean": statistics.fmean(spent),
                "decide_median": statistics.median(dec),
                "decide_mean": statistics.fmean(dec),
                "after_mean": statistics.fmean(after),
            }
        )
        decisions.append(list(chosen))
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        asyncio.run(b.replay(bodies, args.warm))
        prof.disable()
        prof.dump_stats(args.profile)
    best = {k: min(r[k] for r in rounds) for k in rounds[0]}
    if per_pick:
        names = sorted({k for p in per_pick for k in p})
        print(
            "phases, median µs over all timed Picks: "
            + ", ".join(
                f"{k} {statistics.median(p.get(k, 0) for p in per_pick) / 1e3:.1f}" for k in names
            )
        )
    print(
        f"{len(bodies)} bodies, {args.endpoints} endpoints, {args.rounds} rounds; lowest per round (µs): "
        + ", ".join(f"{k} {v:.1f}" for k, v in best.items())
    )
    same = all(d == decisions[0] for d in decisions)
    print(f"decisions identical across rounds: {same}")
    if args.decisions:
        with open(args.decisions, "w") as f:
            for r, d in enumerate(decisions):
                for i, x in enumerate(d):
                    f.write(f"{r} {i} {x}\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rounds": rounds, "best": best}, f)


if __name__ == "__main__":
    main()
    sys.exit(0)
