#!/bin/bash
# Historical (h154, 2026-12-07): ran on main `0eb9c46` (its branch `be297af`). The probes here patch
# functions that have since changed or gone; kept as the record of docs/benchmarks.md's
# `## h154` section, not maintained (run on `0eb9c46`).
for v in br base br base base br base br; do
  echo "$v asis $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
  (cd /tmp/h154/$v && PYTHONPATH=/tmp/h154/$v /work/wt/h154/.venv/bin/python /tmp/h154/lag.py asis 3)
done
echo "end $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
