#!/bin/bash
# usage: flock /tmp/kinference-bench.lock docs/h188/ab.sh HIST.pkl PAIRS OUT.jsonl
# Alternated base/branch/branch/base… fresh processes, one replay of HIST each (replay.py).
HIST=$1; PAIRS=$2; OUT=$3; HERE=$(dirname "$(readlink -f "$0")")
for i in $(seq 1 "$PAIRS"); do
  if [ $((i % 2)) = 1 ]; then ORDER="base br"; else ORDER="br base"; fi
  for side in $ORDER; do
    if [ $side = base ]; then P=/tmp/h188-base0; else P=/tmp/h188-br; fi
    line=$(cd /tmp && PYTHONPATH=$P /work/wt/h188/.venv/bin/python "$HERE/replay.py" "$HIST" 1)
    echo "{\"side\": \"$side\", \"utc\": \"$(date -u +%T)\", \"load\": $(cut -d' ' -f1 /proc/loadavg), \"r\": $line}" >> "$OUT"
  done
done
