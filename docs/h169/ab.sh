#!/bin/bash
# h169: ROUNDS rounds of base/new/new/base runs in one locked command; a run is
# bench_precise_pick's 64 KiB cold x1 row, then its 1 MiB cold x1, chat x16 and chat-spread x16
# rows (as h165's docs/h165/ab.sh; summary: python docs/h165/summarize.py OUTDIR...).
# usage: ab.sh ROUNDS OUTDIR   (copies in /tmp/h169/{base,new}; this worktree's venv)
PY=/work/wt/h169/.venv/bin/python; R=$1; OUT=$2; mkdir -p "$OUT"; n=0
for r in $(seq 1 "$R"); do
  for side in base new new base; do
    n=$((n+1))
    { echo "start $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
      cd /tmp/h169/$side || exit 1
      PYTHONPATH=$PWD $PY -m loadtest.bench_precise_pick --sizes 65536 --workloads coldx1 --modes precise
      PYTHONPATH=$PWD $PY -m loadtest.bench_precise_pick --sizes 1048576 \
        --workloads coldx1,chatx16,chat-spreadx16 --modes precise
      echo "end $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"; } > "$OUT/$n-$side.txt" 2>&1
  done
done
