# Historical (h147, 2026-12-07): ran on main `0069989`. The probes here patch
# functions that have since changed or gone; kept as the record of docs/benchmarks.md's
# `## h147` section, not maintained (run on `0069989`).
import json, statistics as st, sys

rows = json.load(open("/tmp/h147/rows.json"))
A = {(r["seed"], r["rate"], r["conv"], r["turn"]): r for r in rows if r["router"] == "kinference"}
P = {
    (r["seed"], r["rate"], r["conv"], r["turn"]): r
    for r in rows
    if r["router"] == "kinference-precise"
}
keys = sorted(set(A) & set(P))


def eng(ep):
    return ep.split(":")[0] if ep else None


def med(v):
    return st.median(v) if v else float("nan")


def summary(ks, label):
    if not ks:
        print(label, "none")
        return
    d = lambda f: [P[k][f] - A[k][f] for k in ks]
    front = lambda r: r["pre"] + r["push"] + r["post"] + r["relay"]
    print(
        f"{label:42s} n={len(ks):3d} dTTFT med {med(d('ttft')):6.2f} mean {st.mean(d('ttft')):6.2f} | dPick med {med(d('pick')):5.2f} (ready {med(d('ready')):5.2f} dec {med(d('dec')):5.2f}) | dEngine med {med(d('engine')):6.2f} mean {st.mean(d('engine')):6.2f} | dFront med {med([front(P[k]) - front(A[k]) for k in ks]):5.2f}"
    )


same_c = [k for k in keys if abs(P[k]["cached"] - A[k]["cached"]) <= 16]
diff_c = [k for k in keys if abs(P[k]["cached"] - A[k]["cached"]) > 16]
summary(keys, "all pairs")
summary(same_c, "same cached (|d|<=16)")
summary(
    [k for k in same_c if P[k]["running"] == A[k]["running"]],
    "same cached, same running on its engine",
)
summary(
    [k for k in same_c if P[k]["running"] == A[k]["running"] == 0],
    "same cached, alone on its engine",
)
summary([k for k in same_c if P[k]["running"] != A[k]["running"]], "same cached, different running")
summary([k for k in diff_c if P[k]["cached"] > A[k]["cached"]], "precise cached more")
summary([k for k in diff_c if P[k]["cached"] < A[k]["cached"]], "precise cached less")
for kind in ("chat", "doc", "shared"):
    summary(
        [k for k in same_c if A[k]["kind"] == kind and P[k]["running"] == A[k]["running"] == 0],
        f"  same cached, alone, {kind}",
    )
# sum of TTFT difference decomposed
tot = {
    f: sum(P[k][f] - A[k][f] for k in keys)
    for f in ("ttft", "pick", "engine", "pre", "push", "post", "relay")
}
print("sum over all pairs (ms):", {k: round(v, 1) for k, v in tot.items()})
tot = {
    f: sum(P[k][f] - A[k][f] for k in same_c)
    for f in ("ttft", "pick", "engine", "pre", "push", "post", "relay")
}
print("sum over same-cached pairs (ms):", {k: round(v, 1) for k, v in tot.items()})
