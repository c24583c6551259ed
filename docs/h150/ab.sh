#!/bin/bash
# ab.sh: kinference mixed 6 --duration 60, base (/tmp/h150/trace = main 0069989 + log hook) vs branch (+ hook)
PY=/work/wt/h150/.venv/bin/python
echo "ab lock got $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> /tmp/h150/times
for run in "2 base a" "2 branch a" "2 branch b" "2 base b" "1 branch a" "1 base a"; do
  set -- $run; seed=$1; side=$2; tag=$3
  src=/tmp/h150/$side; [ $side = base ] && src=/tmp/h150/trace
  d=/tmp/h150/ab/s$seed-$side-$tag; mkdir -p $d
  echo "$d start $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> /tmp/h150/times
  (cd $src && H150_TRACE=$d/tr PYTHONPATH=$src $PY -m loadtest.bench_routing --regime mixed --routers kinference \
    --rates 6 --duration 60 --seeds $seed --json $d/r.json --out $d/r.md --requests $d/r.jsonl > $d/log 2>&1)
  echo "$d rc $? end $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> /tmp/h150/times
done
