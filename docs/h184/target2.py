"""h184 scratch: issue 16's target 2 from the gateways' own final reports (the probe's
"final" lines: the chosen worker's precise prediction and the engine's reported cached
tokens, as `kinference_prefix_precise_error_tokens` observes them): the share within one
block (16 tokens), and the misses' signs.

    python docs/h184/target2.py DIR...       # routing bench probe dirs
    python docs/h184/target2.py PREFIX.trace.jsonl...   # mocker.py traces (per mode/rate)
"""

import collections
import glob
import json
import sys


def main():
    for d in sys.argv[1:]:
        files = [d] if d.endswith(".jsonl") else sorted(glob.glob(f"{d}/gw.*.jsonl"))
        for f in files:
            groups = collections.defaultdict(list)
            for line in open(f):
                r = json.loads(line)
                if r["k"] == "final":
                    groups[(r.get("mode", ""), r.get("rate", ""))].append(r)
            for key, fin in groups.items():
                err = [min(r["pred"], r["prompt"]) - r["cached"] for r in fin]
                within = sum(abs(e) <= 16 for e in err)
                over = sum(e > 16 for e in err)
                print(
                    f"{f.rsplit('/', 1)[-1]} {key}: {within}/{len(fin)} = {within / len(fin):.3f} "
                    f"within one block; over-predicted {over}, under {len(fin) - within - over}"
                )


if __name__ == "__main__":
    main()
