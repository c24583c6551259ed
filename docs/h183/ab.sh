#!/bin/bash
# ab.sh TAG REGIME RATE DURATION SEEDS ROUTERS SIDE... : one routing-bench run per SIDE
# (base|br: git-archive copies under /tmp/h183), in the order given; each run's figures in
# /tmp/h183/out/TAG_I_SIDE.{json,md,jsonl,log}, a line per run in /tmp/h183/out/runs.txt.
tag=$1; regime=$2; rate=$3; duration=$4; seeds=$5; routers=$6; shift 6
out=/tmp/h183/out
i=0
for side in "$@"; do
  i=$((i + 1))
  name=${tag}_${i}_${side}
  start=$(date -u +%H:%M:%S); load0=$(cut -d' ' -f1 /proc/loadavg)
  (cd /tmp/h183/$side && PYTHONPATH=/tmp/h183/$side timeout 400 /work/wt/h183/.venv/bin/python \
     -m loadtest.bench_routing --regime "$regime" --routers "$routers" --rates "$rate" \
     --duration "$duration" --seeds "$seeds" --json $out/$name.json --out $out/$name.md \
     --requests $out/$name.jsonl > $out/$name.log 2>&1)
  echo "$name rc=$? $start-$(date -u +%H:%M:%S) load $load0 -> $(cut -d' ' -f1 /proc/loadavg)" \
    | tee -a $out/runs.txt
done
