"""Print one trace file's records in time order from its first prompt, for `--ms` ms:
python docs/h176/events.py FILE [--ms 60]."""

from __future__ import annotations

import json
import sys

path = sys.argv[1]
span = float(sys.argv[sys.argv.index("--ms") + 1]) if "--ms" in sys.argv else 60.0
records = [json.loads(line) for line in open(path) if line.strip()]
t0 = min(r["t0"] for r in records if "p" in r)
for r in sorted(records, key=lambda r: r["t0"]):
    at = (r["t0"] - t0) * 1000
    if at < -1 or at > span:
        continue
    kind = "prep" if "p" in r else "bg" if "b" in r else "pick"
    extra = (
        f"chars {r['chars']} pos {r['pos']} enc {r['encoded']} here {r['here_ms']:.2f}"
        f" thread {r['thread_ms']:.2f} defer {int(r.get('deferred', 0))}"
        if kind == "prep"
        else f"pos {r['pos0']}->{r['pos']} enc {r['encoded']}"
        if kind == "bg"
        else ""
    )
    print(f"{at:7.2f} +{r['ms']:6.2f} {kind:4s} {extra}")
