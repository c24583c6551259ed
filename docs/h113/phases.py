import os, statistics, sys, time
from kinference.routing import blocks as B

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stamp"))
from h113common import calls as load_calls, pollute as _pollute

calls = load_calls()
COLD = int(os.environ.get("COLD", "0"))
tt = time.thread_time_ns
ph = {}


def hashes(self, model, segments, *, block_bytes, max_blocks):
    t0 = tt()
    family = (model, block_bytes, max_blocks, segments[0][:block_bytes])
    known = self._known.get(family)
    rep = known is not None and B._repeated(segments, known, block_bytes * max_blocks)
    t1 = tt()
    data, ends, equal = B._encoded(segments, block_bytes * max_blocks, known)
    count = min(len(data) // block_bytes, max_blocks)
    t2 = tt()
    if known is None:
        hashes = self._chain(model, data, block_bytes, count)
    else:
        hashes = self._continued(
            model, data, block_bytes, count, known=known, equal=equal // block_bytes
        )
    t3 = tt()
    kept = B._bounded(segments, len(ends), block_bytes * max_blocks)
    k = None if kept is None else B._Known(kept, data, ends, hashes)
    t4 = tt()
    self._remember(family, k)
    t5 = tt()
    r = self._interned((model, block_bytes, count, hashes[-1]), hashes)
    t6 = tt()
    for name, a, b in (
        ("family+repeated", t0, t1),
        ("encoded", t1, t2),
        ("chain+same", t2, t3),
        ("bounded+Known", t3, t4),
        ("remember", t4, t5),
        ("interned", t5, t6),
        ("ALL", t0, t6),
    ):
        ph.setdefault(name, []).append((b - a) / 1000)
    return r


B.PrefixHasher.hashes = hashes
fresh = [(m, [(x + ".")[:-1] for x in s], bb, mb) for m, s, bb, mb in calls]
h = B.PrefixHasher()
for m, s, bb, mb in fresh:
    if COLD:
        _pollute(2)
    if COLD == 3:
        for x in s:
            x.count("\x00")
    h.hashes(m, s, block_bytes=bb, max_blocks=mb)
print(f"cold={COLD}", "  ".join(f"{k} {statistics.median(v[100:]):.1f}" for k, v in ph.items()))
