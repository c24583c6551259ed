#!/bin/bash
# ab.sh TAG RATE SIDE... : one bench run per SIDE (base|br), in order, Dynamo regime, seeds 1,2
tag=$1; rate=$2; shift 2
i=0
for side in "$@"; do
  i=$((i+1))
  name=${tag}_${i}_${side}
  start=$(date -u +%H:%M:%S); l0=$(cut -d' ' -f1 /proc/loadavg)
  (cd /tmp/h163/$side && PYTHONPATH=/tmp/h163/$side timeout 300 /work/wt/h163/.venv/bin/python -m loadtest.bench_routing \
     --regime dynamo --routers kinference --rates $rate --duration 12 --seeds 1,2 \
     --json /tmp/h163/out/$name.json --out /tmp/h163/out/$name.md --requests /tmp/h163/out/$name.jsonl > /tmp/h163/out/$name.log 2>&1)
  rc=$?
  echo "$name rc=$rc $start $(date -u +%H:%M:%S) load $l0 -> $(cut -d' ' -f1 /proc/loadavg)" | tee -a /tmp/h163/out/runs.txt
done
