"""h200: for each decision, how many candidates the router predicted to hold most of the
prompt (cached >= half of the reported cached tokens, and > 1 block), per row, and how busy the
chosen one was against the least busy holder and the least busy candidate.
Usage: python3 holders.py RUN_DIR [ROUTERS]"""

import collections
import glob
import json
import sys

run = sys.argv[1]
order = sys.argv[2].split(",") if len(sys.argv) > 2 else ["kinference", "kinference-precise"]
traces = []
for path in glob.glob(f"{run}/trace.*.jsonl"):
    rows = sorted((json.loads(x) for x in open(path)), key=lambda r: r["t"])
    traces.append([r for r in rows if r["prompt"] >= 100 and r.get("c")])
traces.sort(key=lambda rows: rows[0]["t"])
for router, rows in zip(order, traces):
    count = collections.Counter()
    extra = []
    for r in rows:
        best = max(r["c"].values())
        if best <= 16:
            count["cold"] += 1
            continue
        holders = [e for e, c in r["c"].items() if c >= best / 2]
        count[min(len(holders), 3)] += 1
        inflight = {e: v[0] for e, v in r["w"].items()}
        extra.append(inflight[r["ep"]] - min(inflight.values()))
    print(
        f"{router}: decisions with a warm candidate by number of holders {dict(sorted(count.items(), key=str))}; "
        f"chosen's in flight above the least busy: mean {sum(extra) / len(extra):.2f}"
    )
    # Where it left a warm holder for a worker that would compute the prompt again, and how
    # busy the holders it stayed with were: the load at which each row's model moves.
    moves, stays = [], []
    for r in rows:
        best = max(r["c"].values())
        if best <= 1000:
            continue
        inflight = {e: v[0] for e, v in r["w"].items()}
        holders = [e for e, c in r["c"].items() if c >= best / 2]
        least_holder = min(inflight[e] for e in holders)
        if r["c"][r["ep"]] < best / 2:
            moves.append((least_holder, inflight[r["ep"]], round(best), round(r["ttft"] or 0)))
        else:
            stays.append(least_holder)
    hist = collections.Counter(int(s) for s in stays)
    print(
        f"  left every warm holder {len(moves)} times (least busy holder's in flight, chosen's, "
        f"cached there, predicted TTFT): {moves[:8]}"
    )
    print(
        f"  stayed on a holder {len(stays)} times; the least busy holder's in flight then: {dict(sorted(hist.items()))}"
    )
