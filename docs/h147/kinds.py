# Historical (h147, 2026-12-07): ran on main `0069989`. The probes here patch
# functions that have since changed or gone; kept as the record of docs/benchmarks.md's
# `## h147` section, not maintained (run on `0069989`).
import json, statistics as st, sys

rows = json.load(open("/tmp/h147/rows.json"))


def q(v, p):
    v = sorted(v)
    return v[min(int(p * len(v)), len(v) - 1)]


for mode in ("kinference", "kinference-precise"):
    for kind in sorted({r["kind"] for r in rows}):
        for cold in (True, False):
            rs = [
                r
                for r in rows
                if r["router"] == mode
                and r["kind"] == kind
                and (r["cached"] < 0.5 * r["prompt"]) == cold
            ]
            if not rs:
                continue
            f = lambda k: st.median(r[k] for r in rs)
            print(
                f"{mode:19s} {kind:6s} {'cold' if cold else 'hit ':4s} n={len(rs):3d} ttft {f('ttft'):6.1f} engine {f('engine'):6.1f} pick {f('pick'):5.2f} ready {f('ready'):5.2f} dec {f('dec'):5.2f} pre {f('pre'):5.2f} relay {f('relay'):5.2f} prompt {f('prompt'):6.0f}"
            )
# which requests are at/above p90
for mode in ("kinference", "kinference-precise"):
    for seed in sorted({r["seed"] for r in rows}):
        rs = [r for r in rows if r["router"] == mode and r["seed"] == seed]
        if not rs:
            continue
        p90 = q([r["ttft"] for r in rs], 0.9)
        top = sorted(rs, key=lambda r: -r["ttft"])[:6]
        print(
            mode,
            seed,
            f"p90={p90:.1f}",
            [
                (
                    r["kind"],
                    r["conv"],
                    r["turn"],
                    round(r["ttft"], 1),
                    round(r["pick"], 1),
                    round(r["engine"], 1),
                    r["cached"],
                    r["running"],
                )
                for r in top
            ],
        )
