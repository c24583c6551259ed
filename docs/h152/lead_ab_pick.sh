#!/bin/bash
# A/B of Pick CPU: bench_pick_replay at 8 and 2 endpoints per arm (git archive copies in /tmp/lead/<arm>)
out=/tmp/lead/ab/$1; mkdir -p $out; : > $out/runs.txt
echo "start $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $out/runs.txt
for arm in $2; do
  for n in ${NS:-8 2}; do
    line=$(cd /tmp/lead/$arm && PYTHONPATH=/tmp/lead/$arm /work/main/.venv/bin/python /tmp/lead/replay2.py $n --rounds 3 2>&1 | tail -1)
    echo "$arm $n $line" >> $out/runs.txt
  done
done
echo "end $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $out/runs.txt
