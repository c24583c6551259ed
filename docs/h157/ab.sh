#!/bin/bash
# usage: ab.sh OUTDIR "base br br base ..." [bench args]
out=$1; order=$2; shift 2
mkdir -p /tmp/h157/ab/$out
i=0
for arm in $order; do
  i=$((i+1))
  cd /tmp/h157/$arm
  echo "$i $arm $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> /tmp/h157/ab/$out/log
  PYTHONPATH=$PWD /work/wt/h157/.venv/bin/python -m loadtest.bench_gateway --systems kinference "$@" > /tmp/h157/ab/$out/$i-$arm.md 2>/tmp/h157/ab/$out/$i-$arm.err
done
echo "end $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> /tmp/h157/ab/$out/log
