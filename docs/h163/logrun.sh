#!/bin/bash
cd /tmp/h163/log
for rate in 3 9; do
  start=$(date -u +%H:%M:%S); l0=$(cut -d' ' -f1 /proc/loadavg)
  H163_LOG=/tmp/h163/out/occ_$rate.jsonl PYTHONPATH=/tmp/h163/log timeout 200 /work/wt/h163/.venv/bin/python -m loadtest.bench_routing \
     --regime dynamo --routers kinference --rates $rate --duration 12 --seeds 1,2 \
     --json /tmp/h163/out/occ_$rate.json --out /tmp/h163/out/occ_$rate.md --requests /tmp/h163/out/occ_$rate.req.jsonl > /tmp/h163/out/occ_$rate.log 2>&1
  echo "occ_$rate rc=$? $start $(date -u +%H:%M:%S) load $l0 -> $(cut -d' ' -f1 /proc/loadavg)" | tee -a /tmp/h163/out/runs.txt
done
