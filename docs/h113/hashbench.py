"""Time PrefixHasher.hashes over the recorded calls; COLD=2: 3 MiB sweep + python work between calls.
Prints the median per-call thread CPU (µs) of each of R rounds and checks the hashes against block_hashes."""

import os, pickle, statistics, sys, time, json
from kinference.routing.blocks import PrefixHasher, block_hashes

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stamp"))
from h113common import calls as _calls, pollute as _pollute

calls = _calls()
COLD = int(os.environ.get("COLD", "0"))
R = int(sys.argv[1]) if len(sys.argv) > 1 else 5


def pollute():
    _pollute(2)


if os.environ.get("CHECK"):
    h = PrefixHasher()
    for m, s, bb, mb in calls:
        # fresh lists as a parse makes them
        got = h.hashes(
            m, [x.encode().decode() if False else x for x in s], block_bytes=bb, max_blocks=mb
        )
        assert list(got) == block_hashes(m, s, block_bytes=bb, max_blocks=mb)
    print("check ok")
meds = []
means = []
tt = time.thread_time_ns
for r in range(R):
    h = PrefixHasher()
    out = []
    # copies so no string identity with the previous call (a parse makes new strings)
    fresh = [(m, [(x + ".")[:-1] for x in s], bb, mb) for m, s, bb, mb in calls]
    for m, s, bb, mb in fresh:
        if COLD:
            pollute()
        if COLD == 3:
            for x in s:
                x.count("\x00")
        t = tt()
        h.hashes(m, s, block_bytes=bb, max_blocks=mb)
        out.append((tt() - t) / 1000)
    meds.append(statistics.median(out[100:]))
    means.append(statistics.fmean(out[100:]))
print(
    f"cold={COLD} median per round: "
    + " ".join(f"{m:.1f}" for m in meds)
    + "  means "
    + " ".join(f"{m:.1f}" for m in means)
    + f"  min {min(meds):.1f}  load {open('/proc/loadavg').read().split()[0]}"
)
