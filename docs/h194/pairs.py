import json, sys, statistics, glob

for path in sorted(glob.glob("/tmp/lead/runs/r*/req.jsonl")):
    reqs = [json.loads(l) for l in open(path)]
    by = {}
    for r in reqs:
        by.setdefault((r["router"], r["rate"]), {})[(r["conversation"], r["turn"], r["kind"])] = r
    for rate in (3.0, 6.0):
        a = by.get(("kinference", rate), {})
        p = by.get(("kinference-precise", rate), {})
        same = [
            p[k]["ttft_s"] - a[k]["ttft_s"]
            for k in a
            if k in p and abs(p[k]["cached_tokens"] - a[k]["cached_tokens"]) <= 16
        ]
        diffc = sum(
            1 for k in a if k in p and abs(p[k]["cached_tokens"] - a[k]["cached_tokens"]) > 16
        )
        cold = [
            p[k]["ttft_s"] - a[k]["ttft_s"]
            for k in a
            if k in p and p[k]["cached_tokens"] == 0 and a[k]["cached_tokens"] == 0
        ]
        big = [
            p[k]["ttft_s"] - a[k]["ttft_s"]
            for k in a
            if k in p
            and abs(p[k]["cached_tokens"] - a[k]["cached_tokens"]) <= 16
            and a[k]["prompt_tokens"] > 8000
        ]
        print(
            path.split("/")[-2],
            rate,
            f"same-cached n {len(same)} median diff {1000 * statistics.median(same):+.1f} ms; differ {diffc}; "
            f"both-cold n {len(cold)} median {1000 * statistics.median(cold) if cold else 0:+.1f}; long prompts(>8k) n {len(big)} median {1000 * statistics.median(big) if big else 0:+.1f}",
        )
