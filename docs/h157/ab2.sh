#!/bin/bash
# one locked command: the in-process harness (6 a side) then bench_gateway (6 a side), alternated
out=/tmp/h157/ab/$1; mkdir -p $out
echo "lock $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $out/log
i=0
for arm in base br br base base br br base base br br base; do
  i=$((i+1)); cd /tmp/h157/$arm
  echo "inproc $i $arm $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $out/log
  PYTHONPATH=$PWD timeout 60 /work/wt/h157/.venv/bin/python /tmp/h157/inproc.py 2000 3 > $out/inproc-$i-$arm.txt 2>&1
done
echo "inproc end $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $out/log
/tmp/h157/ab.sh $(basename $out)/gw "base br br base base br br base base br br base" --rounds 1 --requests-1 300 --requests-16 1000
echo "unlock $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $out/log
