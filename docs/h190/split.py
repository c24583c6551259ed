"""h190 scratch: thread CPU per replay function on a recorded history (wrapped, not cProfile).
PYTHONPATH=<checkout> python docs/h190/split.py HIST.pkl"""

import pickle, sys, collections, time

sys.path.insert(0, "/work/wt/h190/docs/h188")
import replay
from kinference.kvcache import replayed as R, replan as P, order as O, pool as PL, ageing as A

T = collections.Counter()
clock = time.thread_time


def wrap(obj, name):
    f = getattr(obj, name)

    def w(*a, **k):
        s = clock()
        r = f(*a, **k)
        T[name] += clock() - s
        return r

    setattr(obj, name, w)


for obj, name in (
    (R._Replay, "renew"),
    (R._Replay, "compute"),
    (R._Replay, "take"),
    (R._Replay, "kept"),
    (R._Replay, "held_of"),
    (O.Order, "ranks_of"),
    (O.Order, "keys"),
    (A.WorkerAges, "order"),
    (R.Replayed, "surviving"),
    (P, "_afresh"),
    (P, "_again"),
    (P, "_restep"),
    (P.Plan, "_renamed"),
    (P, "planned"),
    (PL.PoolCaches, "room"),
    (PL.PoolCaches, "extend"),
):
    wrap(obj, name)
log = pickle.load(open(sys.argv[1], "rb"))
print(replay.run(log))
for k, v in T.most_common():
    print(f"{k:12s} {v * 1e3:8.1f} ms")
