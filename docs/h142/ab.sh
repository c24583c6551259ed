#!/bin/bash
# ab.sh TAG "REGIME RATES DURATION ROUTERS" ARM... : each ARM (base|branch) runs the cell, seeds 1,2
TAG=$1; CELL=$2; shift 2; set -- $CELL "$@"; REG=$1; RATES=$2; DUR=$3; ROUT=$4; shift 4
PY=/work/wt/h142/.venv/bin/python; n=0
echo "$TAG lock start $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> /tmp/h142/times
for arm in "$@"; do
  n=$((n+1)); d=/tmp/h142/ab/$TAG/$n-$arm; mkdir -p $d
  (cd /tmp/h142/$arm && echo "$REG $RATES $arm start $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $d/times && \
   PYTHONPATH=/tmp/h142/$arm $PY -m loadtest.bench_routing --regime $REG --routers $ROUT --rates $RATES \
     --duration $DUR --seeds 1,2 --json $d/r.json --out $d/r.md --requests $d/r.jsonl > $d/log 2>&1; \
   echo "rc $? $REG $RATES $arm end $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $d/times)
done
echo "$TAG lock end $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> /tmp/h142/times
