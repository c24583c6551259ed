"""h184 scratch: join the probe's Picks to the requests, per run; list per (mode, rate) the
figures and the requests whose cached tokens differ by more than a block between the modes.

    python docs/h184/an.py mocker PREFIX...           # mocker.py's PREFIX.{trace,req}.jsonl
    python docs/h184/an.py route DIR REQUESTS.jsonl   # routing bench: DIR of the probe, --requests
"""

import collections
import glob
import json
import sys

SLACK = float(__import__("os").environ.get("H184_SLACK", "1e9"))


def q(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p
    f = int(k)
    c = min(f + 1, len(xs) - 1)
    return xs[f] + (xs[c] - xs[f]) * (k - f)


def load(path):
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def join(picks, reqs):
    """Each request's Pick: the first unused Pick on its engine at or after its send."""
    picks = sorted(picks, key=lambda p: p["t0"])
    used = set()
    for r in sorted(reqs, key=lambda r: r["start"] + r["arrival_s"]):
        send = r["start"] + r["arrival_s"]
        for i, p in enumerate(picks):
            if i in used or p["t0"] < send - 0.002:
                continue
            if p["t0"] > send + max(r.get("route_s", 0.0), 0.0) + 0.5:
                break
            if (
                p.get("ep")
                and r["engine"]
                and not r["engine"].endswith(p["ep"].split("//")[-1])
                and p["ep"] not in r["engine"]
            ):
                continue
            if p.get("pred") is not None and abs(p.get("ptok", 0) - r["prompt_tokens"]) > SLACK:
                continue  # precise: the tokenizer's count is the engine's
            used.add(i)
            r["pick"] = p
            break
    return reqs


def summary(key, reqs, evs):
    done = [r for r in reqs if not r.get("error")]
    prompt = sum(r["prompt_tokens"] for r in done)
    hit = sum(r["cached_tokens"] for r in done) / prompt if prompt else 0.0
    ttft = [r["ttft_s"] * 1000 for r in done]
    within = [
        abs((r["pick"].get("pred") or 0) - r["cached_tokens"]) <= 16
        for r in done
        if "pick" in r and r["pick"].get("pred") is not None
    ]
    removed = sum(e["removed"] for e in evs)
    print(
        f"{key}: n={len(done)} hit={hit:.3f} p50={q(ttft, 0.5):.0f} p90={q(ttft, 0.9):.0f} "
        f"joined={sum('pick' in r for r in done)} within1={sum(within)}/{len(within)} "
        f"removed_blocks={removed} batches_with_removals={len(evs)}"
    )


def pairs(by):
    keys = sorted({(k[0], k[1]) for k in by})  # (run, rate)
    for run, rate in keys:
        a, p = by.get((run, rate, "approximate")), by.get((run, rate, "precise"))
        if not a or not p:
            continue
        ia = {(r["conversation"], r["turn"]): r for r in a}
        ip = {(r["conversation"], r["turn"]): r for r in p}
        diff = [
            (k, ia[k], ip[k])
            for k in ia.keys() & ip.keys()
            if abs(ia[k]["cached_tokens"] - ip[k]["cached_tokens"]) > 16
        ]
        only = ia.keys() ^ ip.keys()
        more = sum(x[2]["cached_tokens"] - x[1]["cached_tokens"] for x in diff)
        print(
            f"\n## {run} rate {rate}: {len(diff)} requests differ by > 1 block "
            f"(precise more in {sum(x[2]['cached_tokens'] > x[1]['cached_tokens'] for x in diff)}),"
            f" net precise {more:+d} tokens; sent under one mode only: {len(only)}"
        )
        for k, ra, rp in sorted(diff, key=lambda x: x[1]["arrival_s"]):
            print(
                f"  conv {k[0]} turn {k[1]} {ra['kind']} prompt {ra['prompt_tokens']}: "
                f"approx cached {ra['cached_tokens']} ttft {ra['ttft_s'] * 1000:.0f} | "
                f"precise cached {rp['cached_tokens']} ttft {rp['ttft_s'] * 1000:.0f}"
            )
            for name, r in (("A", ra), ("P", rp)):
                pk = r.get("pick")
                if not pk or "cand" not in pk or "eps" not in pk["cand"]:
                    print(f"    {name}: t={r['arrival_s']:.2f} no pick joined")
                    continue
                c = pk["cand"]
                rows = []
                for i, ep in enumerate(c["eps"]):
                    mark = "*" if ep == pk.get("ep") else " "
                    rows.append(
                        f"{mark}{ep[-5:]} c{c['cached'][i]:.0f} s{(c['seq'] or [0] * 9)[i]:.0f} "
                        f"pr{c['pred'][i]:.0f} w{c['wait'][i]:.0f} o{c['own'][i]:.0f} "
                        f"sl{c['slot'][i]:.0f} u{c['unsure'][i]:.0f} "
                        f"T{(pk.get('totals') or pk.get('scores') or [0] * 9)[i]:.3g}"
                    )
                print(
                    f"    {name}: t={r['arrival_s']:.2f} got {r['engine'][-5:]} | "
                    + " | ".join(rows)
                )


def main():
    if sys.argv[1] == "mocker":
        by = collections.defaultdict(list)
        for prefix in sys.argv[2:]:
            recs = load(f"{prefix}.trace.jsonl")
            reqs = load(f"{prefix}.req.jsonl")
            run = prefix.rsplit("/", 1)[-1]
            for mode in ("approximate", "precise"):
                for rate in sorted({r["rate"] for r in reqs}):
                    picks = [
                        x
                        for x in recs
                        if x["k"] == "pick" and x["mode"] == mode and x["rate"] == rate
                    ]
                    evs = [
                        x
                        for x in recs
                        if x["k"] == "ev" and x["mode"] == mode and x["rate"] == rate
                    ]
                    rr = join(picks, [r for r in reqs if r["mode"] == mode and r["rate"] == rate])
                    by[(run, rate, mode)] = rr
                    summary(f"{run} {mode} {rate}", rr, evs)
        pairs(by)
    else:  # route DIR REQUESTS SEEDS RATES ROUTERS (the command's lists, comma-separated)
        d, reqfile = sys.argv[2], sys.argv[3]
        seeds, rates, routers = (s.split(",") for s in sys.argv[4:7])
        order = [(int(s), float(r), ro) for s in seeds for r in rates for ro in routers]
        reqs = load(reqfile)
        starts = sorted(
            (json.loads(line) for f in glob.glob(f"{d}/bench.*.jsonl") for line in open(f)),
            key=lambda s: s["start"],
        )
        assert len(starts) == len(order), (len(starts), len(order))
        picks = [p for f in glob.glob(f"{d}/gw.*.jsonl") for p in load(f) if p["k"] == "pick"]
        evs = [p for f in glob.glob(f"{d}/gw.*.jsonl") for p in load(f) if p["k"] == "ev"]
        by = {}
        names = {"kinference": "approximate", "kinference-precise": "precise"}
        for (seed, rate, router), s in zip(order, starts):
            rr = [
                dict(r, start=s["start"])
                for r in reqs
                if r["seed"] == seed and r["rate"] == rate and r["router"] == router
            ]
            inside = [p for p in picks if s["start"] - 1 <= p["t0"] <= s["end"] + 1]
            ev = [e for e in evs if s["start"] - 1 <= e["t"] <= s["end"] + 1]
            mode = names.get(router, router)
            by[(f"{d.rstrip('/').rsplit('/', 1)[-1]}-s{seed}", rate, mode)] = join(inside, rr)
            summary(f"seed {seed} {mode} {rate}", rr, ev)
        pairs(by)


if __name__ == "__main__":
    main()
