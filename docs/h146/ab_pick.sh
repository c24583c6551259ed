#!/bin/bash
# A/B of Pick CPU: bench_pick_replay at 8 and 2 endpoints per arm (git archive copies in /tmp/h146/<arm>, built in place)
# usage: ab_pick.sh TAG "arm arm ..."  (arms: dirs under /tmp/h146); one line per run
out=/tmp/h146/ab/$1; mkdir -p $out; : > $out/runs.txt
echo "start $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $out/runs.txt
for arm in $2; do
  for n in 8 2; do
    line=$(cd /tmp/h146/$arm && PYTHONPATH=/tmp/h146/$arm /work/wt/h146/.venv/bin/python /tmp/h146/replay2.py $n --rounds 3)
    echo "$arm $n $line" >> $out/runs.txt
  done
done
echo "end $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $out/runs.txt
