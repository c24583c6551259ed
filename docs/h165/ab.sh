#!/bin/bash
# h165: base/new/new/base rounds of bench_precise_pick (64 KiB cold+chat x1, 1 MiB chat x16 + spread), one locked command.
# usage: ab.sh ROUNDS OUTDIR   (copies in /tmp/h165/{base,new}, python = the worktree's venv)
PY=/work/wt/h165/.venv/bin/python; R=$1; OUT=$2; mkdir -p "$OUT"; n=0
for r in $(seq 1 "$R"); do
  for side in base new new base; do
    n=$((n+1)); f="$OUT/$n-$side.txt"
    { echo "start $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
      (cd /tmp/h165/$side && PYTHONPATH=$PWD $PY -m loadtest.bench_precise_pick --sizes 65536 --workloads coldx1,chatx1 --modes precise)
      (cd /tmp/h165/$side && PYTHONPATH=$PWD $PY -m loadtest.bench_precise_pick --sizes 1048576 --workloads chatx16,chat-spreadx16 --modes precise)
      echo "end $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"; } > "$f" 2>&1
  done
done
