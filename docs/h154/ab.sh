#!/bin/bash
# Historical (h154, 2026-12-07): ran on main `0eb9c46` (its branch `be297af`). The probes here patch
# functions that have since changed or gone; kept as the record of docs/benchmarks.md's
# `## h154` section, not maintained (run on `0eb9c46`).
# usage: [RATES=3,6 SEEDS=1,2] ab.sh ROUND order... (e.g. r1 base br br base); run under flock
R=$1; shift
i=0
for v in "$@"; do
  i=$((i+1)); tag=$R-$i-$v; d=/tmp/h154/runs/$tag; mkdir -p $d
  echo "$tag start $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
  (cd /tmp/h154/$v && H154_HOLD=$d PYTHONPATH=/tmp/h154/probe:/tmp/h154/$v /work/wt/h154/.venv/bin/python -m loadtest.bench_routing \
     --regime dynamo --routers kinference-precise --rates ${RATES:-3,6} --duration 12 --seeds ${SEEDS:-1,2} \
     --requests $d/req.jsonl --json $d/run.json --out $d/out.md > $d/log.txt 2>&1)
  echo "$tag end $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) rc $?"
done
