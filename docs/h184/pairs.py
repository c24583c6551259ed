"""h184 scratch: the same (seed, conversation, turn) under both modes, per rate: TTFT
precise minus approximate for pairs with the same cached tokens (within a block), and for
those that differ; the top decile of each mode by kind.

    python docs/h184/pairs.py REQUESTS.jsonl...
"""

import collections
import json
import statistics
import sys


def main():
    rows = [json.loads(line) for p in sys.argv[1:] for line in open(p)]
    by = collections.defaultdict(dict)
    for i, r in enumerate(rows):
        if r.get("error"):
            continue
        mode = "P" if "precise" in r["router"] else "A"
        run = r.get("_file", "")
        by[(r["rate"], mode)][(r["seed"], r["conversation"], r["turn"], r["arrival_s"] // 1e9)] = r
    for rate in sorted({k[0] for k in by}):
        a, p = by[(rate, "A")], by[(rate, "P")]
        same = [
            p[k]["ttft_s"] * 1e3 - a[k]["ttft_s"] * 1e3
            for k in a.keys() & p.keys()
            if abs(p[k]["cached_tokens"] - a[k]["cached_tokens"]) <= 16
        ]
        more = [
            p[k]["ttft_s"] * 1e3 - a[k]["ttft_s"] * 1e3
            for k in a.keys() & p.keys()
            if p[k]["cached_tokens"] - a[k]["cached_tokens"] > 16
        ]
        less = [
            p[k]["ttft_s"] * 1e3 - a[k]["ttft_s"] * 1e3
            for k in a.keys() & p.keys()
            if a[k]["cached_tokens"] - p[k]["cached_tokens"] > 16
        ]
        print(
            f"rate {rate}: pairs {len(a.keys() & p.keys())}; same cached {len(same)} "
            f"median P−A {statistics.median(same):+.1f} ms (P slower in {sum(x > 0 for x in same)}); "
            f"P more cached {len(more)} (median {statistics.median(more) if more else 0:+.0f} ms); "
            f"P less cached {len(less)} (median {statistics.median(less) if less else 0:+.0f} ms)"
        )
        for mode, d in (("A", a), ("P", p)):
            t = sorted(d.values(), key=lambda r: r["ttft_s"])
            top = t[int(len(t) * 0.9) :]
            kinds = collections.Counter(
                (r["kind"], "hit" if r["cached_tokens"] > 64 else "cold") for r in top
            )
            print(f"   {mode} top decile ({len(top)}): {dict(kinds)}")


if __name__ == "__main__":
    main()
