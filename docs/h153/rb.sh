#!/bin/bash
# usage: rb.sh OUTDIR SIDE... ; each: bench_routing dynamo, kinference-precise, 3 req/s, 12 s, seeds 1,2
out=$1; shift; mkdir -p $out; n=0
echo "start $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $out/log
for side in "$@"; do
  n=$((n+1))
  (cd /tmp/h153/$side && PYTHONPATH=$PWD timeout 170 /work/wt/h153/.venv/bin/python -m loadtest.bench_routing --regime dynamo --routers kinference-precise --rates 3 --duration 12 --seeds 1,2 --json $out/$n-$side.json --out $out/$n-$side.md --requests $out/$n-$side.jsonl > $out/$n-$side.txt 2>&1)
  echo "$n $side rc=$? $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $out/log
done
echo "end $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $out/log
