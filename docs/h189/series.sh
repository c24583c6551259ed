#!/bin/bash
# usage: docs/h189/series.sh PAIRS OUT.jsonl [mocker.py args]
# One pair (base, branch; order alternating) per lock hold, each ≤ 6 min (the guide's bound).
PAIRS=$1; OUT=$2; shift 2; HERE=$(dirname "$(readlink -f "$0")")
for i in $(seq 1 "$PAIRS"); do
  if [ $((i % 2)) = 1 ]; then ORDER="base br"; else ORDER="br base"; fi
  flock /tmp/kinference-bench.lock timeout 360 "$HERE/ab.sh" 1 "$OUT" --order "$ORDER" "$@"
done
