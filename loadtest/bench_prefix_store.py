"""The native prefix store's per-call cost at the index's workload shape, in process.

    python -m loadtest.bench_prefix_store [--rounds 15] [--calls 2000] [--label NAME]

One slot holding 50,000 blocks (its bound); `record` of 270 hashes of which 230 are held
(85 %) and 40 new (so 40 evictions a call); `record` of 270 hashes all held (the per-key
conversion's share at its largest); `match` of a 270-block prompt on one holder. Random
64-bit hashes (three 30-bit digits each, as the cluster's are). Prints µs a call, the
lowest and the median of `--rounds` rounds of `--calls` calls. For A/B run it from each
side's `git archive` copy built in place (`python setup.py build_ext --inplace`),
alternated inside one `flock /tmp/kinference-bench.lock` (docs/benchmarks.md, h73).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

BOUND = 50_000
HELD, NEW = 230, 40


def lowest_and_median(run: Callable[[int], None], rounds: int, calls: int) -> tuple[float, float]:
    """µs a call: the lowest and the median round."""
    means = []
    for round_ in range(rounds):
        started = time.perf_counter()
        run(round_)
        means.append((time.perf_counter() - started) / calls * 1e6)
    means.sort()
    return means[0], means[len(means) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2_000)
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    from kinference.native._prefix import PrefixStore

    rng = random.Random(7)
    store = PrefixStore()
    store.record(0, tuple(rng.getrandbits(64) for _ in range(BOUND)), BOUND)
    stem = tuple(rng.getrandbits(64) for _ in range(HELD))
    calls = args.calls
    prompts = [
        stem + tuple(rng.getrandbits(64) for _ in range(NEW)) for _ in range(args.rounds * calls)
    ]
    held = prompts[0]
    store.record(0, held, BOUND)

    def records(round_: int) -> None:
        for prompt in prompts[round_ * calls : (round_ + 1) * calls]:
            store.record(0, prompt, BOUND)

    def refreshes(_: int) -> None:
        for _ in range(calls):
            store.record(0, held, BOUND)

    def matches(_: int) -> None:
        for _ in range(calls):
            store.match(held)

    figures = [lowest_and_median(run, args.rounds, calls) for run in (records, refreshes)]
    figures.append(lowest_and_median(matches, args.rounds, calls))
    assert store.match(held) == {0: HELD + NEW}
    names = ("record 85 % held", "record all held", "match")
    print(
        f"{args.label:8s}",
        "  ".join(
            f"{name} {low:6.2f}/{mid:6.2f}" for name, (low, mid) in zip(names, figures, strict=True)
        ),
        "(µs a call, lowest/median)",
    )


if __name__ == "__main__":
    main()
