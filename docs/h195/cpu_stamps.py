"""CPU (thread_time) and wall stamps per request by body size from a traced run:
python3 cpu_stamps.py RUN_DIR. Precise's trace file is the one with tokenizer parts."""

import bisect, glob, json, statistics as st, sys

BUCKETS = [(0, 6000), (6000, 9000), (9000, 1 << 40)]


def med(v):
    return f"{1000 * st.median(v):.2f}" if v else "-"


out = {}
for path in glob.glob(f"{sys.argv[1]}/trace.*.jsonl"):
    rs = [json.loads(line) for line in open(path)]
    reqs = [r for r in rs if "push_in" in r and "first" in r and "bytes" in r]
    mode = "precise" if any("parts" in r for r in reqs) else "approx"
    ev = sorted((r["t"], r["d"], r.get("c", 0.0)) for r in rs if r.get("g") == "ev")
    bg = sorted((r["t"], r["d"], r.get("c", 0.0)) for r in rs if r.get("g") == "bg")
    evt, bgt = [e[0] for e in ev], [b[0] for b in bg]
    for r in reqs:
        parts = {}
        for name, t, d, on_loop, *c in r.get("parts", []):
            parts[name] = parts.get(name, 0.0) + (c[0] if c else 0.0)
        a, b = r["pick_out"], r["first"]
        row = {
            "push in -> Pick answered (wall)": r["pick_out"] - r["push_in"],
            "tokenization, all on the loop (CPU)": parts.get("run_inline", parts.get("run", 0.0)),
            "  of which messages decoded (CPU)": parts.get("decode", 0.0),
            "  of which template rendered (CPU)": parts.get("render", 0.0),
            "  of which tokenizer start, render incl. (CPU)": parts.get("start", 0.0),
            "  of which tokenized, foreground (CPU)": parts.get("advance", 0.0),
            "decision (CPU)": r["decide"][2] if len(r.get("decide", [])) > 2 else 0.0,
            "answer -> first token at the gateway (wall)": b - a,
            "  KV-event steps in it (CPU, loop)": sum(
                e[2] for e in ev[bisect.bisect_left(evt, a) : bisect.bisect_left(evt, b)]
            ),
            "  background slices in it (CPU, thread)": sum(
                x[2] for x in bg[bisect.bisect_left(bgt, a) : bisect.bisect_left(bgt, b)]
            ),
        }
        out.setdefault(mode, []).append((r["bytes"], row))
labels = [
    f"{lo // 1000}–{hi // 1000} kB" if hi < 1 << 40 else f"≥ {lo // 1000} kB" for lo, hi in BUCKETS
]
print("| stamp, median ms | " + " | ".join(f"{l} approx. | {l} precise" for l in labels) + " |")
print("|---|" + "--:|" * (2 * len(BUCKETS)))
counts = [
    str(sum(1 for b, _ in out[m] if lo <= b < hi))
    for lo, hi in BUCKETS
    for m in ("approx", "precise")
]
print("| requests | " + " | ".join(counts) + " |")
for k in list(out["precise"][0][1]):
    cells = [
        med([row[k] for b, row in out[m] if lo <= b < hi])
        for lo, hi in BUCKETS
        for m in ("approx", "precise")
    ]
    print(f"| {k} | " + " | ".join(cells) + " |")
