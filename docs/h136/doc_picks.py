# h136 scratch: the TTFT terms of every cold long prompt's Pick (from docs/h136/sitecustomize.py traces). Usage: python docs/h136/doc_picks.py DIR
import json, sys, glob

for f in sorted(glob.glob(sys.argv[1] + "/tr.*.jsonl"), key=lambda p: int(p.split(".")[-2])):
    print("==", f)
    for n, l in enumerate(open(f)):
        d = json.loads(l)
        if d["tokens"] < 5000 or max(d["cached"]) > d["tokens"] / 2:
            continue
        ch = d["chosen"]
        rows = []
        for i, ep in enumerate(d["eps"]):
            blk = d["rate"][i] * d["own"][i] ** 2 / 2
            rows.append(
                (
                    1 / d["score"][i],
                    i == ch,
                    ep.split(":")[-1][-4:],
                    d["seq"][i] if d["seq"] else None,
                    round(d["pred"][i]),
                    round(d["own"][i]),
                    round(blk),
                    round(d["fp"][i]) if d["fp"] else None,
                    round(d["score"][i], 3),
                    round(d["unsure"][i]),
                    round(d["pending"][i]),
                )
            )
        rows.sort(key=lambda r: -r[8])
        print(" pick#%d tokens %d home %s" % (n, d["tokens"], d["home"]))
        for r in rows:
            print(
                "   ",
                "*" if r[1] else " ",
                "ep %s seq %s pred %s own %s blk %s fp %s score %s unsure %s pend %s" % r[2:],
            )
