#!/bin/bash
# ab.sh TAG ARM... : each ARM (base|fix) runs kinference alone on vllm-64 18, mixed 6, few-slots 18, seeds 1,2
TAG=$1; shift; n=0
for arm in "$@"; do
  n=$((n+1)); d=${OUT:-/tmp/h136/ab}/$TAG/$n-$arm; mkdir -p $d
  for cell in "vllm-64 18" "mixed 6" "few-slots 18"; do
    set -- $cell
    (cd ${TREES:-/tmp/h136}/$arm && echo "$1 $2 start $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $d/times && \
     PYTHONPATH=${TREES:-/tmp/h136}/$arm ${PY:-python} -m loadtest.bench_routing --regime $1 --routers kinference --rates $2 \
       --duration 10 --seeds 1,2 --json $d/$1.json --out $d/$1.md --requests $d/$1.jsonl > $d/$1.log 2>&1; \
     echo "$1 $2 end $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $d/times)
  done
done
