#!/bin/bash
# base br br base: docs/h186/catchup.py 200000 64 in each tree
for tree in base br br base; do
  if [ $tree = base ]; then dir=/tmp/h186-base; else dir=/work/wt/h186; fi
  echo "== $tree $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
  (cd $dir && PYTHONPATH=$dir timeout 300 /work/wt/h186/.venv/bin/python -u docs/h186/catchup.py 200000 64)
done
