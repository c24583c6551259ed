# Historical (h147, 2026-12-07): ran on main `0069989`. The probes here patch
# functions that have since changed or gone; kept as the record of docs/benchmarks.md's
# `## h147` section, not maintained (run on `0069989`).
import glob, json, statistics as st, sys

sys.path.insert(0, "/tmp/h147")
import an

rows = an.load("/tmp/h147/runs/e1")
evs = {}
for f in glob.glob("/tmp/h147/runs/e1/ev.*.jsonl"):
    evs[f] = [json.loads(l) for l in open(f)]
allev = [e for v in evs.values() for e in v]
busy = sorted(e[2] for e in allev)
print(
    "batches",
    len(allev),
    "busy ms p50 %.3f p90 %.3f p99 %.3f max %.3f"
    % (st.median(busy), busy[int(0.9 * len(busy))], busy[int(0.99 * len(busy))], busy[-1]),
)
big = sorted(allev, key=lambda e: -e[2])[:5]
print("largest:", [(round(e[2], 2), e[3], e[5]) for e in big])


# per request: batches (any engine) whose processing overlapped [disp, first], and those of its own engine that ended within 5 ms before first
def q(v, p):
    v = sorted(v)
    return v[min(int(p * len(v)), len(v) - 1)]


over_all, own_last = [], []
for r in rows:
    ov = [e for e in allev if e[0] < r["first_t"] and e[1] > r["disp_t"]]
    own = [e for e in ov if e[4] == r["ep"]]
    busy_in = sum(e[2] for e in ov)
    r["ev_busy"] = busy_in
    r["ev_own"] = [
        (
            round((e[0] - r["first_t"]) * 1e3, 2),
            round((e[1] - r["first_t"]) * 1e3, 2),
            round(e[2], 2),
            e[5],
        )
        for e in own
    ]
    # own-engine batch started within 3 ms before the gateway saw the first token
    r["own_pre"] = sum(e[2] for e in own if r["first_t"] - 0.003 <= e[0] <= r["first_t"])
print(
    "event CPU on the loop between dispatch and the first token, ms: p50 %.2f mean %.2f p90 %.2f"
    % (
        st.median(r["ev_busy"] for r in rows),
        st.mean(r["ev_busy"] for r in rows),
        q([r["ev_busy"] for r in rows], 0.9),
    )
)
print(
    "own-engine batch begun <=3 ms before the first token read: %d of %d requests; its busy ms p50 %.2f"
    % (
        sum(1 for r in rows if r["own_pre"] > 0),
        len(rows),
        st.median([r["own_pre"] for r in rows if r["own_pre"] > 0] or [0]),
    )
)
for r in rows:
    if r["kind"] == "doc" and r["cached"] == 0:
        print(
            " cold doc s%d c%d engine %.1f running %d ev_busy %.2f own %s"
            % (r["seed"], r["conv"], r["engine"], r["running"], r["ev_busy"], r["ev_own"][-4:])
        )
json.dump(rows, open("/tmp/h147/rows_e1.json", "w"))
