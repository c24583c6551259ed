#!/bin/bash
# A/B of vllm-64 at 6 req/s, kinference alone, seeds 1 and 2, per arm (copies as in ab_pick.sh)
out=/tmp/h146/ab/$1; mkdir -p $out; : > $out/runs.txt
i=0
for arm in $2; do
  i=$((i+1))
  echo "$arm $i start $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $out/runs.txt
  (cd /tmp/h146/$arm && PYTHONPATH=/tmp/h146/$arm /work/wt/h146/.venv/bin/python -m loadtest.bench_routing --regime vllm-64 --routers kinference --rates 6 --duration 10 --seeds 1,2 --json $out/$i-$arm.json --out $out/$i-$arm.md > $out/$i-$arm.log 2>&1)
  echo "$arm $i end $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg) rc $?" >> $out/runs.txt
done
