#!/bin/bash
# ab.sh TAG REGIME RATE DURATION SIDE... : kinference alone, shipped defaults, seeds 1,2, each SIDE
# (base|trial: a `git archive` copy in /tmp/h152/SIDE with build_ext --inplace) in turn.
TAG=$1; REG=$2; RATE=$3; DUR=$4; shift 4
PY=/work/wt/h152/.venv/bin/python
i=0
for side in "$@"; do
  i=$((i+1)); d=/tmp/h152/runs/$TAG-$i-$side; mkdir -p $d
  echo "$TAG $i $side start $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> /tmp/h152/times
  (cd /tmp/h152/$side && PYTHONPATH=/tmp/h152/$side $PY -m loadtest.bench_routing --regime $REG \
    --routers kinference --rates $RATE --duration $DUR --seeds 1,2 \
    --json $d/r.json --out $d/r.md --requests $d/r.jsonl > $d/log 2>&1)
  echo "rc $? $TAG $i $side end $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> /tmp/h152/times
done
