#!/bin/bash
# ab.sh TAG REGIME RATE DURATION SIDE... : kinference only, seed 1, each SIDE (base|branch) in turn
TAG=$1; REG=$2; RATE=$3; DUR=$4; shift 4
PY=/work/wt/h149/.venv/bin/python
i=0
for side in "$@"; do
  i=$((i+1)); d=/tmp/h149/runs/$TAG-$i-$side; mkdir -p $d
  echo "$TAG $i $side start $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> /tmp/h149/times
  (cd /tmp/h149/$side && H149_PROBES=$d/probes PYTHONPATH=/tmp/h149/$side $PY -m loadtest.bench_routing --regime $REG \
    --routers kinference --rates $RATE --duration $DUR --seeds 1 \
    --json $d/r.json --out $d/r.md --requests $d/r.jsonl > $d/log 2>&1)
  echo "rc $? $TAG $i $side end $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> /tmp/h149/times
done
