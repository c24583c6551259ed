#!/bin/bash
PY=/work/wt/h159/.venv/bin/python
echo "start $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
for round in 1 2 3; do
  for arm in base br br base; do
    echo -n "$arm "; (cd /tmp/h159/$arm && PYTHONPATH=/tmp/h159/$arm $PY /tmp/h159/bench_replicas.py)
  done
done
echo "end $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
