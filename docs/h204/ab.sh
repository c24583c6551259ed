#!/bin/bash
# h204 A/B: base (/tmp/h204/a = 92848cc, the bench alone) vs branch (/tmp/h204/b), runs
# alternated A B A B ..., each one command under the bench lock; one JSON line per run.
#   docs/h204/ab.sh FIRST LAST [ROUNDS]
VENV=/work/wt/h204/.venv/bin/python
OUT=${OUT:-/work/wt/h204/docs/h204/ab}
for i in $(seq "$1" "$2"); do
  for side in a b; do
    start=$(date -u +%H:%M:%S); load0=$(cut -d' ' -f1 /proc/loadavg)
    (cd /tmp/h204/$side && PYTHONPATH=/tmp/h204/$side flock /tmp/kinference-bench.lock \
      $VENV -m loadtest.bench_precise_cpu --workloads dynamo --rounds "${3:-3}" \
      --json $OUT/$side-$i.json > $OUT/$side-$i.txt 2>&1)
    echo "{\"side\": \"$side\", \"run\": $i, \"start\": \"$start\", \"end\": \"$(date -u +%H:%M:%S)\", \"load0\": $load0, \"load1\": $(cut -d' ' -f1 /proc/loadavg)}" >> $OUT/runs.jsonl
  done
done
