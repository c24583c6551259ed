"""h190 scratch: counts of the replay's steps on a recorded history (compute calls, evictions,
renew's blocks, Plan._of misses).  PYTHONPATH=<checkout> python docs/h190/counts.py HIST.pkl"""

import pickle, sys, collections

sys.path.insert(0, "/work/wt/h190/docs/h188")
import replay
from kinference.kvcache import replayed as R, replan as P

c = collections.Counter()
orig = R._Replay.compute


def compute(self, count, own):
    last = own is getattr(self, "renewed", False)  # step 2 (reverted) only
    before = len(self.newer)
    ev, ex = self.evicted, self.exhausted
    orig(self, count, own)
    c["last" if last else "set"] += 1
    c[("evict", last)] += len(self.newer) < before
    c[("past", self.past())] += 1


R._Replay.compute = compute
o2 = R._Replay.renew


def renew(self, blocks, output):
    f = o2(self, blocks, output)
    c["renew_blocks"] += len(blocks)
    c["renew_found"] += int(f.sum())
    c["newer_len"] += len(self.newer)
    return f


R._Replay.renew = renew
oo = P.Plan._of


def of(self, key, request, order, rp):
    f = self.named.get(key)
    c["of"] += 1
    c["of_miss"] += f is None or f.blocks is not request.blocks
    return oo(self, key, request, order, rp)


P.Plan._of = of
log = pickle.load(open(sys.argv[1], "rb"))
print(replay.run(log))
print(c)
