#!/bin/bash
out=/tmp/h153/out/st; mkdir -p $out
echo "start $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $out/log
for side in base br2 br2 base; do
  (cd /tmp/h153/$side && PYTHONPATH=$PWD /work/wt/h153/.venv/bin/python /tmp/h153/mb_stamps.py --rounds 2 --seeds 1,2 --stamps > $out/$side-$(date +%s%N).txt 2>&1)
done
echo "end $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $out/log
