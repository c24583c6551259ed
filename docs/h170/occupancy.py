"""Join `nvext_run.py`'s side file to its `--requests` lines and split paired TTFTs (h170).

    python docs/h170/occupancy.py REQUESTS.jsonl SIDE.jsonl [A B]

Per request: the mocker that ran it (nvext `worker_id`), what that mocker ran when it
arrived (requests started and not ended; of them, those before their first token), and
the Dynamo frontend's own TTFT (nvext `timing`), so that client TTFT - frontend TTFT is
what lies outside the frontend (the client's and any router's hop, both ways). Then, per
seed and router: the outside part, the occupancy, the top decile's make-up and the p90 that
A would have with B's median outside part; and for A's and B's pairs with the same cached
tokens (one 16-token block): the TTFT difference by occupancy difference, and a fit.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from pairs import BLOCK, quantile, sign_p

Row = dict[str, Any]


def worker(nvext: dict[str, Any]) -> str:
    info = nvext.get("worker_id")
    if isinstance(info, dict):
        return str(info.get("decode_worker_id") or info.get("prefill_worker_id"))
    return str(info)


def _occupancy(rows: list[Row]) -> None:
    for r in rows:
        t = r["arrival_s"]
        mates = [o for o in rows if o is not r and o["worker"] == r["worker"]]
        r["running"] = sum(o["arrival_s"] <= t < o["arrival_s"] + o["total_s"] for o in mates)
        r["prefilling"] = sum(o["arrival_s"] <= t < o["arrival_s"] + o["ttft_s"] for o in mates)


def joined(req_path: str, side_path: str) -> dict[tuple[int, str], list[Row]]:
    with open(side_path) as lines:
        side = {s["response_id"]: s for s in map(json.loads, lines)}
    runs: dict[tuple[int, str], list[Row]] = defaultdict(list)
    with open(req_path) as lines:
        for row in map(json.loads, lines):
            extra = side.get(row["response_id"])
            timing = (extra or {}).get("nvext", {}).get("timing")
            if row["error"] or not timing:
                continue
            row["worker"] = worker(extra["nvext"])  # type: ignore[index]
            row["ttft_ms"] = row["ttft_s"] * 1000
            row["outside_ms"] = row["ttft_ms"] - timing["ttft_ms"]
            runs[(row["seed"], row["router"])].append(row)
    for rows in runs.values():
        _occupancy(rows)
    return runs


def _cold(r: Row) -> bool:
    return bool(r["cached_tokens"] < r["prompt_tokens"] / 2)


def per_run(runs: dict[tuple[int, str], list[Row]], b: str) -> None:
    for (seed, router), rows in sorted(runs.items()):
        per = defaultdict(int)
        for r in rows:
            per[r["worker"]] += 1
        ttft = [r["ttft_ms"] for r in rows]
        cut = quantile(ttft, 0.9)
        top = [r for r in rows if r["ttft_ms"] >= cut]
        hits = [r["running"] for r in top if not _cold(r)]
        outside_b = statistics.median(r["outside_ms"] for r in runs[(seed, b)])
        as_b = [r["ttft_ms"] - r["outside_ms"] + outside_b for r in rows]
        print(
            f"seed {seed} {router}: n {len(rows)}, requests per mocker {sorted(per.values())}, "
            f"running at arrival mean {statistics.fmean(r['running'] for r in rows):.2f}; "
            f"outside the frontend median {statistics.median(r['outside_ms'] for r in rows):.2f} ms"
        )
        print(
            f"    p50 / p90 {quantile(ttft, 0.5):.1f} / {cut:.1f} ms; with {b}'s outside part "
            f"{quantile(as_b, 0.5):.1f} / {quantile(as_b, 0.9):.1f}; top decile {len(top)}: "
            f"{len(top) - len(hits)} cold, {len(hits)} hits joining {hits} running"
        )


def _deltas(runs: dict[tuple[int, str], list[Row]], a: str, b: str) -> list[tuple[float, ...]]:
    out = []
    for seed in sorted({s for s, _ in runs}):
        ka = {(r["conversation"], r["turn"]): r for r in runs.get((seed, a), [])}
        kb = {(r["conversation"], r["turn"]): r for r in runs.get((seed, b), [])}
        for key in set(ka) & set(kb):
            x, y = ka[key], kb[key]
            if abs(x["cached_tokens"] - y["cached_tokens"]) > BLOCK:
                continue
            inside = (x["ttft_ms"] - x["outside_ms"]) - (y["ttft_ms"] - y["outside_ms"])
            out.append((
                x["ttft_ms"] - y["ttft_ms"], x["running"] - y["running"],
                x["prefilling"] - y["prefilling"], x["outside_ms"] - y["outside_ms"], inside,
            ))  # fmt: skip
    return out


def paired(runs: dict[tuple[int, str], list[Row]], a: str, b: str) -> None:
    deltas = _deltas(runs, a, b)
    print(f"same cached pairs: {len(deltas)} ({a} - {b}, ms: TTFT; outside; inside the frontend)")
    groups = (
        ("all", lambda d: True),
        ("same running and prefilling", lambda d: d[1] == 0 and d[2] == 0),
        (f"{a} joins more running", lambda d: d[1] > 0),
        (f"{a} joins fewer running", lambda d: d[1] < 0),
    )
    for name, keep in groups:
        ds = [d for d in deltas if keep(d)]
        if not ds:
            continue
        cols = [[d[i] for d in ds] for i in (0, 3, 4)]
        tests = [f"{statistics.median(c):+.2f} (p {sign_p(sum(v > 0 for v in c), len(c)):.2g})"
                 for c in cols]  # fmt: skip
        print(
            f"  {name}: n {len(ds)}; " + "; ".join(tests)
            + f"; running diff mean {statistics.fmean(d[1] for d in ds):+.2f}"
        )  # fmt: skip
    if len(deltas) > 3:
        x = np.array([[1.0, d[1], d[2]] for d in deltas])
        coef, *_ = np.linalg.lstsq(x, np.array([d[0] for d in deltas]), rcond=None)
        print(
            f"  fit: dTTFT = {coef[0]:+.2f} + {coef[1]:+.2f} x d(running) "
            f"+ {coef[2]:+.2f} x d(prefilling) ms"
        )


def main() -> None:
    req_path, side_path = sys.argv[1], sys.argv[2]
    a, b = (sys.argv[3], sys.argv[4]) if len(sys.argv) > 4 else ("kinference", "dynamo")
    runs = joined(req_path, side_path)
    per_run(runs, b)
    paired(runs, a, b)


if __name__ == "__main__":
    main()
