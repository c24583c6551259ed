#!/bin/bash
# usage: flock /tmp/kinference-bench.lock docs/h190/ab.sh BASE_DIR BRANCH_DIR HIST.pkl PAIRS OUT.jsonl
# Alternated base/branch/branch/base… fresh processes, one replay of HIST each (docs/h188/replay.py).
BASE=$1; BR=$2; HIST=$3; PAIRS=$4; OUT=$5; HERE=$(dirname "$(readlink -f "$0")")
for i in $(seq 1 "$PAIRS"); do
  if [ $((i % 2)) = 1 ]; then ORDER="base br"; else ORDER="br base"; fi
  for side in $ORDER; do
    if [ $side = base ]; then P=$BASE; else P=$BR; fi
    line=$(cd /tmp && PYTHONPATH=$P /work/wt/h190/.venv/bin/python "$HERE/../h188/replay.py" "$HIST" 1)
    echo "{\"side\": \"$side\", \"utc\": \"$(date -u +%T)\", \"load\": $(cut -d' ' -f1 /proc/loadavg), \"r\": $line}" >> "$OUT"
  done
done
