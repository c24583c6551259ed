#!/bin/bash
for v in br base br base base br base br; do
  echo "$v asis $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
  (cd /tmp/h154/$v && PYTHONPATH=/tmp/h154/$v /work/wt/h154/.venv/bin/python /tmp/h154/lag.py asis 3)
done
echo "end $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
