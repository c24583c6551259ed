"""h172: a precise Pick's wait from push to `ready`, split per kind of prompt.

    python3 docs/h172/an.py RUN_DIR...   (directories traced with docs/h172/sitecustomize.py)

Joins the bench's requests to the gateway's records with h147's `an.load` and prints, per
kind (doc, shared, chat-first, chat-next), the p50 / mean in ms of each step.
"""

import json
import os
import statistics
import sys

import h172_load

h147 = h172_load.script("h147_an", "h147/an.py")

STEPS = [
    ("commit->pick", "commit", "pick0"),
    ("pick->task", "pick0", "early0"),
    ("task: parse", "early0", "prep0"),
    ("prep->tok", "prep0", "run0"),
    ("tok wall", "run0", "run1"),
    ("tok->prep end", "run1", "prep1"),
    ("prep end->task end", "prep1", "early1"),
    ("task end->ready", "early1", "ready"),
    ("pick->ready", "pick0", "ready"),
    ("ready->decide", "ready", "dec0"),
    ("decide", "dec0", "dec1"),
    ("pick total", "pick0", "pick1"),
]
CPU = ["cpu", "text_ms", "start_ms", "advance_ms"]


def records(directory: str) -> list[dict]:
    rows = h147.load(directory)
    gw = {}
    for name in os.listdir(directory):
        if name.startswith("gw."):
            with open(os.path.join(directory, name)) as lines:
                for line in lines:
                    rec = json.loads(line)
                    gw[rec["flow"]] = rec
    out = []
    for row in rows:
        rec = next(
            r
            for r in gw.values()
            if abs(r["pick0"] - (row["send"] + (row["pre"] + row["push"]) / 1e3)) < 1e-6
        )
        kind = (
            row["kind"]
            if row["kind"] != "chat"
            else ("chat-first" if row["turn"] == 0 else "chat-next")
        )
        tok = rec.get("tok") or []
        if tok:
            rec = {**rec, **tok[-1][2], "how": tok[-1][0], "n_tok": len(tok)}
        out.append({**rec, "kind": kind, "ttft": row["ttft"]})
    return out


def main() -> None:
    recs = [r for d in sys.argv[1:] for r in records(d)]
    kinds = [*sorted({r["kind"] for r in recs}), "all"]
    for kind in kinds:
        rs = [r for r in recs if kind in ("all", r["kind"])]
        hows = {}
        for r in rs:
            hows[r.get("how", "-")] = hows.get(r.get("how", "-"), 0) + 1
        print(f"{kind} n={len(rs)} {hows}")
        for label, a, b in STEPS:
            v = [(r[b] - r[a]) * 1e3 for r in rs if a in r and b in r]
            if v:
                p50, mean = statistics.median(v), statistics.fmean(v)
                print(f"  {label:20s} p50 {p50:6.3f} mean {mean:6.3f} max {max(v):6.3f}")
        for name in CPU:
            v = [r[name] for r in rs if name in r]
            if v:
                p50, mean = statistics.median(v), statistics.fmean(v)
                print(f"  cpu {name:16s} p50 {p50:6.3f} mean {mean:6.3f}")


if __name__ == "__main__":
    main()
