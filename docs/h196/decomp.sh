#!/bin/bash
# h196: one diagnostic run — kinference (defaults) and Dynamo's KV router at 3 req/s on Dynamo's
# mockers, nvext asked for (h170's nvext_run.py), the bench's processes' CPU sampled.
# $1 = output dir, $2 = seeds (e.g. 1,2), $3 = routers (default kinference,dynamo)
d=$1; mkdir -p $d
cd /work/wt/h196
.venv/bin/python docs/h196/cpu_sampler.py $d/cpu.jsonl &
sampler=$!
PYTHONPATH=$PWD .venv/bin/python docs/h170/nvext_run.py $d/side.jsonl --regime dynamo \
  --routers ${3:-kinference,dynamo} --rates 3 --duration 60 --seeds $2 \
  --json $d/run.json --requests $d/req.jsonl > $d/log 2>&1
rc=$?
kill $sampler
exit $rc
