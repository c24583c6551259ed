#!/bin/bash
# h206 A/B: base and branch as `git archive` copies, each built, sharing the worktree's
# venv via PYTHONPATH; runs alternated A B A B ..., each its own locked bench command.
# $1 base commit, $2 branch commit, $3 runs a side, $4 output file (one JSON line a run)
set -e
W=/work/wt/h206; PY=$W/.venv/bin/python
base=$1; br=$2; n=$3; out=$4
for side in base br; do
  d=/tmp/h206-ab-$side; rm -rf $d; mkdir -p $d
  c=$base; [ $side = br ] && c=$br
  git -C $W archive $c | tar -x -C $d
  (cd $d && $PY setup.py -q build_ext --inplace > /dev/null 2>&1)
done
for i in $(seq 1 $n); do
  for side in base br; do
    d=/tmp/h206-ab-$side
    t0=$(date -u +%H:%M:%S); l0=$(cut -d' ' -f1 /proc/loadavg)
    res=$(cd $d && flock /tmp/kinference-bench.lock env PYTHONPATH=$d $PY -m loadtest.bench_gateway_streams \
      --systems kinference --rates 6 --duration 20 --rounds 1 --max-tokens 100 --stream-step-s 0.001 2>/dev/null | grep "^| kinference")
    l1=$(cut -d' ' -f1 /proc/loadavg)
    echo "{\"side\": \"$side\", \"run\": $i, \"utc\": \"$t0\", \"load0\": $l0, \"load1\": $l1, \"row\": \"$res\"}" >> $out
    echo "$side $i $t0 $l0 $l1 $res"
  done
done
