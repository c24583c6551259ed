#!/bin/bash
# h196: kinference alone at 3 req/s on Dynamo's mockers, nvext asked for, CPU sampled.
# $1 dir, $2 seeds, $3 optional --tuning YAML
d=$1; mkdir -p $d
cd /work/wt/h196
.venv/bin/python docs/h196/cpu_sampler.py $d/cpu.jsonl &
sampler=$!
args=()
[ -n "$3" ] && args=(--tuning "$3")
PYTHONPATH=$PWD .venv/bin/python docs/h170/nvext_run.py $d/side.jsonl --regime dynamo \
  --routers kinference --rates 3 --duration 60 --seeds $2 "${args[@]}" \
  --json $d/run.json --requests $d/req.jsonl > $d/log 2>&1
rc=$?
kill $sampler
exit $rc
