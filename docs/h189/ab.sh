#!/bin/bash
# usage: flock /tmp/kinference-bench.lock docs/h189/ab.sh PAIRS OUT.jsonl [--order "br base"] [mocker.py args]
# Alternated base/branch/branch/base... (or one pair in the given order), fresh processes,
# one precise mocker run each.
PAIRS=$1; OUT=$2; shift 2; HERE=$(dirname "$(readlink -f "$0")")
FIXED=""
if [ "$1" = "--order" ]; then FIXED=$2; shift 2; fi
for i in $(seq 1 "$PAIRS"); do
  if [ -n "$FIXED" ]; then ORDER=$FIXED; elif [ $((i % 2)) = 1 ]; then ORDER="base br"; else ORDER="br base"; fi
  for side in $ORDER; do
    if [ $side = base ]; then P=/tmp/h189-base; else P=/tmp/h189-br; fi
    start="$(date -u +%T) $(cut -d' ' -f1 /proc/loadavg)"
    line=$(cd "$P" && PYTHONPATH=$P /work/wt/h189/.venv/bin/python "$HERE/mocker.py" "$@" 2>>"$OUT.err" | tail -1)
    echo "{\"side\": \"$side\", \"start\": \"$start\", \"end\": \"$(date -u +%T) $(cut -d' ' -f1 /proc/loadavg)\", \"r\": $line}" >> "$OUT"
  done
done
