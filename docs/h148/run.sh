#!/bin/bash
# run.sh TAG REGIME... : traced kinference,sglang at 6 req/s, seeds 1,2, duration 10, per regime
# Expects /tmp/h148/trace: `git archive 0069989` with docs/h148/trace-hook.patch applied and build_ext run.
TAG=$1; shift
PY=/work/wt/h148/.venv/bin/python
echo "$TAG lock start $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> /tmp/h148/times
for reg in "$@"; do
  d=/tmp/h148/runs/$TAG-$reg; mkdir -p $d
  echo "$reg start $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $d/times
  (cd /tmp/h148/trace && H148_TRACE=$d/tr PYTHONPATH=/tmp/h148/trace $PY -m loadtest.bench_routing --regime $reg \
    --routers kinference,sglang --rates 6 --duration ${DUR:-10} --seeds ${SEEDS:-1,2} \
    --json $d/r.json --out $d/r.md --requests $d/r.jsonl > $d/log 2>&1)
  echo "rc $? $reg end $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $d/times
done
echo "$TAG lock end $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> /tmp/h148/times
