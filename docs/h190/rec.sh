#!/bin/bash
# usage: flock /tmp/kinference-bench.lock docs/h190/rec.sh RATE OUT.pkl LOG  (records with main's kvcache, /tmp/h190-base)
RATE=$1; OUT=$2; LOG=$3
echo "rec start $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> "$LOG"
cd /tmp/h190-base && PYTHONPATH=/tmp/h190-base timeout 360 /work/wt/h190/.venv/bin/python /work/wt/h190/docs/h188/record.py "$OUT" --rates "$RATE" --duration 60 >> "$LOG" 2>&1
echo "rec end $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg) rc=$?" >> "$LOG"
