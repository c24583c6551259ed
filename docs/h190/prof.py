"""h190 scratch: cProfile of one replay of a recorded history (docs/h188/replay.py's `run`).

PYTHONPATH=<checkout>:docs/h188 python docs/h190/prof.py HIST.pkl [N]
"""

import cProfile
import pickle
import pstats
import sys

import replay

with open(sys.argv[1], "rb") as f:
    log = pickle.load(f)
prof = cProfile.Profile()
prof.enable()
print(replay.run(log))
prof.disable()
pstats.Stats(prof).sort_stats("tottime").print_stats(int(sys.argv[2]) if len(sys.argv) > 2 else 30)
