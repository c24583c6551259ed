# h110 scratch: one timeline per hit from the probes of docs/h110/sitecustomize.py.
# Usage: python docs/h110/hop_timeline.py DIR  (DIR holds cli.*.log, gw.*.log, eng.*.log, req.jsonl)
import sys, glob, json, bisect, statistics as st
from collections import defaultdict

d = sys.argv[1]


def load(pat):
    ev = []
    for f in sorted(glob.glob(f"{d}/{pat}.*.log")):
        for line in open(f):
            p = line.split()
            ev.append((int(p[0]), int(p[1]), p[2], p[3:]))
    ev.sort()
    return ev


cli, eng, gw = load("cli"), load("eng"), load("gw")
reqs = [json.loads(l) for l in open(f"{d}/req.jsonl")]
byrid = defaultdict(list)  # response ids repeat across a run's cells (h136)
for r in reqs:
    byrid[r["response_id"]].append(r)
csend = [(t, int(a[0]), int(a[1]), c) for t, c, k, a in cli if k == "csend"]
cst = [x[0] for x in csend]
eid = defaultdict(list)
efirst = defaultdict(list)
for t, _, k, a in eng:
    if k == "eid":
        eid[a[0]].append(t)
    if k == "efirst":
        efirst[a[0]].append(t)


def pick(lst, lo, hi):
    c = [t for t in lst if lo <= t <= hi]
    return c[0] if c else None


erx = [(t, int(a[0])) for t, _, k, a in eng if k == "erx"]
ert = [x[0] for x in erx]
gwev = gw
gwt = [e[0] for e in gw]


def after(lst, times, t0, pred, lim=None):
    i = bisect.bisect_left(times, t0)
    while i < len(lst):
        if lim is not None and lst[i][0] > lim:
            return None
        if pred(lst[i]):
            return lst[i]
        i += 1
    return None


def before(lst, times, t0, pred):
    i = bisect.bisect_left(times, t0) - 1
    while i >= 0:
        if pred(lst[i]):
            return lst[i]
        i -= 1
    return None


rows = []
for t, _, k, a in cli:
    if k != "cres":
        continue
    rid, started, first, cached, prompt = a[0], int(a[1]), int(a[2]), int(a[3]), int(a[4])
    rq = None
    for r in byrid.get(rid, []):
        if abs(r["ttft_s"] * 1e9 - (first - started)) < 2e5:
            rq = r
    if rq is None:
        continue
    s1 = after(csend, cst, started, lambda x: True, first)
    if s1 is None:
        continue
    port = s1[1]
    sl = s1
    i = cst.index(s1[0]) + 1
    while i < len(csend) and csend[i][0] < first and csend[i][1] != port:
        i += 1
    if i < len(csend) and csend[i][1] == port and csend[i][0] < first:
        sl = csend[i]
    row = dict(
        router=rq["router"],
        rate=rq["rate"],
        seed=rq["seed"],
        conv=rq["conversation"],
        turn=rq["turn"],
        kind=rq["kind"],
        cached=cached,
        prompt=prompt,
        ttft=(first - started) / 1e6,
        A=(sl[0] - started) / 1e6,
        A0=(s1[0] - started) / 1e6,
        A12=(sl[0] - s1[0]) / 1e6,
        A12cpu=(sl[3] - s1[3]) / 1e6,
        hlen=s1[2],
        blen=sl[2],
        nsend=2 if sl is not s1 else 1,
    )
    te, tf = pick(eid.get(rid, []), started, first), pick(efirst.get(rid, []), started, first)
    if te is None or tf is None:
        continue
    last = before(erx, ert, te, lambda x: True)
    P = last[1]
    # first erx with port P after started
    e0 = after(erx, ert, started, lambda x: x[1] == P, te)
    row["E"] = (te - last[0]) / 1e6
    row["F"] = (tf - te) / 1e6
    row["to_eng"] = (last[0] - started) / 1e6
    row["in_total"] = (last[0] - sl[0]) / 1e6  # client body sent -> engine has the last bytes
    row["out_total"] = (first - tf) / 1e6  # engine first chunk made -> client has it
    if rq["router"] == "kinference":
        g_head = after(gwev, gwt, started, lambda e: e[2] == "grx" and int(e[3][0]) == port, first)
        g_uw = after(gwev, gwt, started, lambda e: e[2] == "guw", first)
        g_body0 = (
            before(gwev, gwt, g_uw[0], lambda e: e[2] == "grx" and int(e[3][0]) == port)
            if g_uw
            else None
        )
        if g_head and g_uw and g_body0:
            U = int(g_uw[3][0])
            g_body = before(gwev, gwt, g_uw[0], lambda e: e[2] == "grx" and int(e[3][0]) == port)
            g_urx = after(gwev, gwt, tf, lambda e: e[2] == "gurx" and int(e[3][0]) == U, first)
            g_cw = after(
                gwev,
                gwt,
                tf,
                lambda e: e[2] == "gcw" and int(e[3][0]) == port and e[3][2] == "1",
                first,
            )
            row.update(
                gh=(g_head[0] - started) / 1e6,
                gcpu_hb=(g_body[1] - g_head[1]) / 1e6,
                gwall_hb=(g_body[0] - g_head[0]) / 1e6,
                B=(g_body[0] - sl[0]) / 1e6,
                Bhead=(g_head[0] - s1[0]) / 1e6,
                C=(g_uw[0] - g_body[0]) / 1e6,
                Ccpu=(g_uw[1] - g_body[1]) / 1e6,
                D=(last[0] - g_uw[0]) / 1e6,
                D0=(e0[0] - g_uw[0]) / 1e6 if e0 else None,
                nrx=sum(
                    1
                    for e in gwev
                    if e[2] == "grx" and int(e[3][0]) == port and s1[0] <= e[0] <= g_uw[0]
                ),
            )
            if g_urx and g_cw:
                row.update(
                    G=(g_urx[0] - tf) / 1e6,
                    H=(g_cw[0] - g_urx[0]) / 1e6,
                    Hcpu=(g_cw[1] - g_urx[1]) / 1e6,
                    I=(first - g_cw[0]) / 1e6,
                )
            # other gateway work inside the in-path window
            win = [e for e in gwev if sl[0] <= e[0] <= g_uw[0]]
            row["gc_in"] = sum(1 for e in win if e[2] == "gc0")
            row["others_in"] = sum(1 for e in win if e[2] in ("gurx", "gcw"))
            # loop busy at arrival: gateway thread CPU in the 2 ms before sl
            pre = [e for e in gwev if sl[0] - 2_000_000 <= e[0] <= sl[0]]
            row["pre_ev"] = len(pre)
    else:
        row["Bsg"] = (e0[0] - sl[0]) / 1e6 if e0 else None
    rows.append(row)
json.dump(rows, open(f"{d}/rows.json", "w"))


def med(xs):
    xs = [x for x in xs if x is not None]
    return (round(st.median(xs), 3), len(xs)) if xs else None


for router in ("kinference", "sglang"):
    R = [r for r in rows if r["router"] == router]
    H = [r for r in R if r["cached"] > 0 and r["ttft"] < 40]
    print(router, "all", len(R), "hits<40ms", len(H))
    for k in (
        "ttft",
        "A",
        "A0",
        "A12",
        "A12cpu",
        "hlen",
        "blen",
        "to_eng",
        "gh",
        "gcpu_hb",
        "gwall_hb",
        "nsend",
        "Bhead",
        "B",
        "C",
        "Ccpu",
        "nrx",
        "D",
        "D0",
        "E",
        "F",
        "G",
        "H",
        "Hcpu",
        "I",
        "in_total",
        "out_total",
        "Bsg",
        "gc_in",
        "others_in",
    ):
        m = med([r.get(k) for r in H])
        if m:
            print(f"  {k:10s} p50 {m[0]:8.3f}  n={m[1]}")
# pair
key = lambda r: (r["rate"], r["seed"], r["conv"], r["turn"])
K = {key(r): r for r in rows if r["router"] == "kinference"}
S = {key(r): r for r in rows if r["router"] == "sglang"}
pairs = [
    (K[k], S[k])
    for k in K
    if k in S
    and K[k]["cached"] > 0
    and S[k]["cached"] > 0
    and K[k]["ttft"] < 40
    and S[k]["ttft"] < 40
]
print("pairs", len(pairs))
for k in ("ttft", "to_eng", "A", "A0", "A12", "A12cpu", "in_total", "E", "F", "out_total"):
    diffs = [a[k] - b[k] for a, b in pairs if a.get(k) is not None and b.get(k) is not None]
    xs = sorted(diffs)
    kk = len(xs) // 10
    print(
        f"  d{k:10s} p50 {st.median(diffs):7.3f} mean {st.mean(diffs):7.3f} trimmed {st.mean(xs[kk : len(xs) - kk]):7.3f}"
    )
print("per cell")
for cell in sorted({k[:2] for k in K}):
    P = [(a, b) for a, b in pairs if (a["rate"], a["seed"]) == cell]
    out = [f"{cell} n={len(P)}"]
    for k in ("ttft", "to_eng", "E", "F", "out_total"):
        diffs = [a[k] - b[k] for a, b in P if a.get(k) is not None and b.get(k) is not None]
        out.append(f"d{k} {st.median(diffs):.2f}")
    out.append(
        "k C %.2f Ccpu %.2f"
        % (
            st.median([a["C"] for a, b in P if a.get("C")]),
            st.median([a["Ccpu"] for a, b in P if a.get("Ccpu")]),
        )
    )
    out.append(
        "F k %.2f s %.2f" % (st.median([a["F"] for a, b in P]), st.median([b["F"] for a, b in P]))
    )
    print("  ".join(out))
