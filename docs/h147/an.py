# Historical (h147, 2026-12-07): ran on main `0069989`. The probes here patch
# functions that have since changed or gone; kept as the record of docs/benchmarks.md's
# `## h147` section, not maintained (run on `0069989`).
"""h147: join the bench's --requests lines with the gateway probe's records (same monotonic clock)."""

import glob, json, os, sys, statistics as st, itertools


def load(d):
    reqs = [json.loads(l) for l in open(f"{d}/req.jsonl")]
    starts = []
    for f in glob.glob(f"{d}/bench.*.jsonl"):
        starts += [json.loads(l) for l in open(f)]
    # group requests into runs in file order
    runs = []
    for k, g in itertools.groupby(reqs, key=lambda r: (r["router"], r["rate"], r["seed"])):
        runs.append((k, list(g)))
    assert len(runs) == len(starts), (len(runs), len(starts))
    gws = []
    for f in glob.glob(f"{d}/gw.*.jsonl"):
        recs = [json.loads(l) for l in open(f)]
        lag = (
            [json.loads(l) for l in open(f.replace("gw.", "lag."))]
            if os.path.exists(f.replace("gw.", "lag."))
            else []
        )
        gws.append((recs, lag))
    out = []
    for ((router, rate, seed), samples), s in zip(runs, starts):
        assert len(samples) == s["n"]
        t0 = s["start"]
        # the gateway file whose records fall in this run
        hi = t0 + max(x["arrival_s"] for x in samples) + 0.5
        best = max(gws, key=lambda g: sum(1 for r in g[0] if t0 - 0.01 <= r["flow"] <= hi))
        recs, lag = best
        used = set()
        for smp in samples:
            send = t0 + smp["arrival_s"]
            cands = [
                (r["flow"] - send, i)
                for i, r in enumerate(recs)
                if i not in used and -0.0005 <= r["flow"] - send <= 0.2
            ]
            if not cands:
                print("unmatched", router, seed, smp["conversation"], smp["turn"], file=sys.stderr)
                continue
            dt, i = min(cands)
            used.add(i)
            r = recs[i]
            first_c = send + smp["ttft_s"]
            row = dict(
                router=router,
                rate=rate,
                seed=seed,
                conv=smp["conversation"],
                turn=smp["turn"],
                kind=smp["kind"],
                ttft=smp["ttft_s"] * 1e3,
                cached=smp["cached_tokens"],
                prompt=smp["prompt_tokens"],
                pre=(r["flow"] - send) * 1e3,
                push=(r["pick0"] - r["flow"]) * 1e3,
                ready=(r["ready"] - r["pick0"]) * 1e3,
                dec=(r["dec1"] - r["dec0"]) * 1e3,
                pick=(r["pick1"] - r["pick0"]) * 1e3,
                post=(r["disp"] - r["pick1"]) * 1e3,
                engine=(r["first"] - r["disp"]) * 1e3,
                relay=(first_c - r["first"]) * 1e3,
                ep=r.get("ep"),
                pred=r.get("pred"),
                ptok=r.get("ptok"),
                match=r.get("match_ms", 0.0),
                disp_t=r["disp"],
                first_t=r["first"],
                end_t=r["end"],
                cand=r.get("cand"),
                t0=t0,
                send=send,
            )
            # concurrency on the same endpoint at dispatch
            row["running"] = sum(
                1
                for q in recs
                if q is not r and q.get("ep") == r.get("ep") and q["disp"] <= r["disp"] < q["end"]
            )
            row["lag"] = [x for x in lag if send <= x[0] <= first_c]
            out.append(row)
    return out


if __name__ == "__main__":
    rows = []
    for d in sys.argv[1:]:
        rows += load(d)
    json.dump(rows, open("/tmp/h147/rows.json", "w"))
    for mode in ("kinference", "kinference-precise"):
        rs = [r for r in rows if r["router"] == mode]
        print(mode, len(rs))
        for f in (
            "ttft",
            "pre",
            "push",
            "ready",
            "dec",
            "pick",
            "post",
            "engine",
            "relay",
            "match",
        ):
            v = sorted(r[f] for r in rs)
            print(
                f"  {f:7s} p50 {st.median(v):7.2f}  mean {st.mean(v):7.2f}  p90 {v[int(0.9 * len(v))]:7.2f}  max {v[-1]:7.2f}"
            )
