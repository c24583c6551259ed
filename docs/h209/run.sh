#!/bin/bash
# h209: one locked routing-bench command on side $1 (A = main d0465f5, B = trial 61983ee), seed $2,
# run tag $3; the copies in /tmp/h209/{A,B} share /work/wt/h209/.venv through PYTHONPATH.
side=$1; seed=$2; tag=$3; d=/tmp/h209/runs/$tag; mkdir -p $d
cd /tmp/h209/$side
{
  flock 9
  echo "side $side seed $seed start $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)" > $d/times
  PYTHONPATH=/tmp/h209/$side timeout 355 /work/wt/h209/.venv/bin/python -m loadtest.bench_routing \
    --regime dynamo --routers kinference,kinference-precise,dynamo --rates 3 --duration 60 --seeds $seed \
    --dynamo /tmp/dynamo-venv --dynamo-model /tmp/dynamo-model \
    --json $d/run.json --requests $d/req.jsonl --out $d/out.md > $d/log 2>&1
  rc=$?
  echo "end $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) rc $rc" >> $d/times
} 9>/tmp/kinference-bench.lock
