"""One line per run and seed: TTFT p50 / p90 ms, hit rate, output tok/s in the window,
imbalance, the 1-min load at the row's end.  python docs/h183/rows.py FILE.json..."""

import json
import sys

for path in sys.argv[1:]:
    with open(path) as file:
        results = json.load(file)["results"]
    for r in results:
        print(
            f"{path.rsplit('/', 1)[-1][:-5]:16} {r['key'][:12]:12} s{r['seed']} "
            f"p50 {r['ttft_p50_ms']:6.1f} p90 {r['ttft_p90_ms']:6.1f} hit {r['hit_rate']:.3f} "
            f"tok/s {r['window_tok_per_s']:6.1f} imb {r['imbalance']:.2f} load {r['load']:.2f}"
        )
