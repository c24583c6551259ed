"""Lower bound of the hasher's work on the recorded calls: compare with the family's last
segments, encode the rest, chain (C) -- no bookkeeping. COLD=3 as hashbench."""

import os, pickle, statistics, sys, time, json
from kinference.native import load_chain
from kinference.routing.chain import seed

chain = load_chain().hashes
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stamp"))
from h113common import calls as _calls, pollute as _pollute

calls = _calls()
COLD = int(os.environ.get("COLD", "0"))


def pollute():
    _pollute(2)


tt = time.thread_time_ns
meds = []
for r in range(3):
    fams = {}
    out = []
    fresh = [(m, [(x + ".")[:-1] for x in s], bb, mb) for m, s, bb, mb in calls]
    for m, s, bb, mb in fresh:
        if COLD:
            pollute()
        if COLD == 3:
            for x in s:
                x.count("\x00")
        t = tt()
        key = (m, s[0][:bb])
        known = fams.get(key)
        reused = 0
        if known is not None:
            ks = known[0]
            while reused < len(s) and reused < len(ks) and s[reused] == ks[reused]:
                reused += 1
        data = "\x1e".join(s[reused:]).encode("utf-8", "surrogatepass")
        full = (known[1][:0] if known else b"") + data
        n = min(len(full) // bb, mb)
        h = chain(full, bb, n, 1, (), 0) if n else ()
        fams[key] = (s, full)
        out.append((tt() - t) / 1000)
    meds.append(statistics.median(out[100:]))
print(f"lower bound cold={COLD}: " + " ".join(f"{x:.1f}" for x in meds))
