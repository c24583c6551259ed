"""h204 scratch: the Dynamo workload's at-Pick and rest figures of each round of one run.

python docs/h204/rounds.py ROUNDS
"""

import argparse, sys
from loadtest import bench_precise_cpu as b

args = argparse.Namespace(seeds="1,2", rate=3.0, requests=90, model_dir=b.precise_dynamo.MODEL_DIR)
import gc

for r in range(int(sys.argv[1])):
    parts = b.Parts()
    picks = b.dynamo_round(args, parts)
    print(
        r,
        round(parts.seconds["dynamo: tokenization at Pick"] * 1e6 / picks["dynamo"], 1),
        round(parts.seconds["dynamo: the rest in the background"] * 1e6 / picks["dynamo"], 1),
        flush=True,
    )
