#!/bin/bash
# base/br/br/base x 3, the pure-Python store's per-call costs; one JSON line a run
PY=/work/wt/h159/.venv/bin/python
for round in 1 2 3; do
  for arm in base br br base; do
    echo -n "$arm "; (cd /tmp/h159/$arm && PYTHONPATH=/tmp/h159/$arm $PY /tmp/h159/bench_age.py)
  done
done
