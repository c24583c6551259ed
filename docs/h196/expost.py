"""h196: each request's chosen mocker against the others at its arrival, ex post.

    python docs/h196/expost.py REQ.jsonl SIDE.jsonl [REQ SIDE ...]

From the client's own times (a request runs on its mocker from its send to its last token,
nvext names the mocker): per (run, seed, router) the mean sequences the chosen mocker ran at
arrival, the mean of the least busy mocker, and the share of requests sent to a mocker
running >= 5 while another ran <= 2 ("piled"), with their TTFT p50 against the rest.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "h170"))
from occupancy import joined


def main() -> None:
    args = sys.argv[1:]
    for req, side in zip(args[::2], args[1::2]):
        for (seed, router), rows in sorted(joined(req, side).items()):
            workers = sorted({r["worker"] for r in rows})
            piled, rest, least = [], [], []
            for r in rows:
                t = r["arrival_s"]
                load = {
                    w: sum(
                        o is not r
                        and o["worker"] == w
                        and o["arrival_s"] <= t < o["arrival_s"] + o["total_s"]
                        for o in rows
                    )
                    for w in workers
                }
                least.append(min(load.values()))
                (piled if load[r["worker"]] >= 5 and min(load.values()) <= 2 else rest).append(r)
            run = Path(req).parent.name
            p50 = statistics.median(r["ttft_ms"] for r in piled) if piled else float("nan")
            print(
                f"{run} seed {seed} {router}: chosen ran {statistics.fmean(r['running'] for r in rows):.2f}, "
                f"least busy {statistics.fmean(least):.2f}; piled {len(piled)}/{len(rows)} "
                f"(TTFT p50 {p50:.0f} ms, rest {statistics.median(r['ttft_ms'] for r in rest):.0f})"
            )


if __name__ == "__main__":
    main()
