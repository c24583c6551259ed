"""Per-request stamps from docs/h195/trace, by body size: python3 stamps.py RUN_DIR...
Each gateway process's trace file is one router's row (precise: the one with tokenizer parts)."""

import glob, json, statistics, sys

BUCKETS = [(0, 8192), (8192, 16384), (16384, 32768), (32768, 1 << 40)]


def overlap(iv, a, b):
    return sum(max(0.0, min(t + d, b) - max(t, a)) for t, d in iv)


def load(path):
    reqs, g = [], {"lag": [], "bg": [], "ev": []}
    for line in open(path):
        r = json.loads(line)
        if "g" in r:
            g[r["g"]].append((r["t"], r["d"]))
        elif "first" in r and "pick_out" in r:
            reqs.append(r)
    return reqs, g


def rows(paths):
    out = {}
    for path in paths:
        reqs, g = load(path)
        precise = any("parts" in r for r in reqs)
        mode = "precise" if precise else "approx"
        for r in reqs:
            parts = {}
            for name, t, d, on_loop, *_cpu in r.get("parts", []):
                key = name + ("@loop" if on_loop else "@thr")
                parts[key] = parts.get(key, 0.0) + d
            a, b = r["pick_out"], r["first"]
            row = {
                "bytes": r.get("bytes", 0),
                "push": r["push_out"] - r["push_in"],
                "to_answer": r["pick_out"] - r["push_in"],
                "ready": r.get("ready_out", 0) - r.get("ready_in", 0),
                "decide": r.get("decide", [0, 0])[1],
                "answer_to_dispatch": r["dispatch"] - r["pick_out"],
                "gw_ttft": r["first"] - r["dispatch"],
                "win_ev": overlap(g["ev"], a, b),
                "win_bg": overlap(g["bg"], a, b),
                "win_lag": overlap(g["lag"], a, b),
                **parts,
            }
            out.setdefault(mode, []).append(row)
    return out


def main():
    paths = [p for d in sys.argv[1:] for p in glob.glob(f"{d}/trace.*.jsonl")]
    data = rows(paths)
    keys = sorted({k for rs in data.values() for r in rs for k in r} - {"bytes"})
    for lo, hi in BUCKETS:
        print(f"\n### body {lo // 1024}-{hi // 1024 if hi < 1 << 40 else 'max'} KiB")
        print("| stamp (median ms) | " + " | ".join(sorted(data)) + " |")
        print("|---|" + "--:|" * len(data))
        n = {m: [r for r in rs if lo <= r["bytes"] < hi] for m, rs in data.items()}
        print("| n | " + " | ".join(str(len(n[m])) for m in sorted(data)) + " |")
        for k in keys:
            cells = []
            for m in sorted(data):
                v = [r.get(k, 0.0) for r in n[m]]
                cells.append(f"{1000 * statistics.median(v):.2f}" if v else "-")
            print(f"| {k} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
