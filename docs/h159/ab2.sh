#!/bin/bash
PY=/work/wt/h159/.venv/bin/python
echo "start $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
for round in 1 2 3; do
  for arm in base br br base; do
    echo -n "$arm "; (cd /tmp/h159/$arm && PYTHONPATH=/tmp/h159/$arm $PY /tmp/h159/bench_repeat.py)
  done
done
echo "mid $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
for round in 1 2 3; do
  for arm in base br br base; do
    echo "pick $arm $(cd /tmp/h159/$arm && PYTHONPATH=/tmp/h159/$arm $PY /tmp/h159/replay2.py 8 --rounds 3 2>&1 | tail -1)"
  done
done
echo "end $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
