#!/bin/bash
# confirmatory in-process harness A/B: 8 a side, statistic = best of 5 reps (pre-registered)
out=/tmp/h157/ab/$1; mkdir -p $out
echo "lock $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $out/log
i=0
for arm in br base base br br base base br base br br base br base base br; do
  i=$((i+1)); cd /tmp/h157/$arm
  echo "inproc $i $arm $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $out/log
  PYTHONPATH=$PWD timeout 60 /work/wt/h157/.venv/bin/python /tmp/h157/inproc.py 1200 5 > $out/inproc-$i-$arm.txt 2>&1
done
echo "unlock $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $out/log
