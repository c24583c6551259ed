#!/bin/bash
# usage: ab.sh ROUNDS OUTDIR -- mb.py args ; per round base/br/br/base
rounds=$1; out=$2; shift 3
mkdir -p $out; n=0
echo "start $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $out/log
for r in $(seq $rounds); do
  for side in base br br base; do
    n=$((n+1))
    (cd /tmp/h153/$side && PYTHONPATH=$PWD /work/wt/h153/.venv/bin/python /tmp/h153/mb.py "$@" --json $out/$side-$n.json > $out/$side-$n.txt 2>&1)
    echo "$n $side $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $out/log
  done
done
echo "end $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $out/log
