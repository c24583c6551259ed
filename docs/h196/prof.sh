#!/bin/bash
# h196: kinference alone at 3 req/s on Dynamo's mockers, its gateway under cProfile. $1 dir, $2 seed
d=$1; mkdir -p $d
cd /work/wt/h196
H196_PROF=$d PYTHONPATH=docs/h196/prof:$PWD .venv/bin/python -m loadtest.bench_routing --regime dynamo \
  --routers kinference --rates 3 --duration 60 --seeds $2 --json $d/run.json --requests $d/req.jsonl > $d/log 2>&1
