#!/bin/sh
# Alternated A/B of the intake microbenchmark: main's copy (/tmp/h201/a) and the branch's
# (/tmp/h201/b), each a `git archive` with its extension built; one JSON line a run.
#   docs/h201/ab.sh FIRST LAST OUT   (runs FIRST..LAST a side, appended to OUT)
set -e
PY=/work/wt/h201/.venv/bin/python
BATCHES=/work/wt/h201/docs/h201/mocker_batches.msgpack
for i in $(seq "$1" "$2"); do
  for side in a b; do
    when=$(date -u +%H:%M:%S); load=$(cut -d' ' -f1 /proc/loadavg)
    line=$(cd /tmp && PYTHONPATH=/tmp/h201/$side flock /tmp/kinference-bench.lock \
      $PY /tmp/h201/bench_event_intake.py "$BATCHES" --rounds 30 --tag "$side-$i")
    echo "$line $when $load" >> "$3"
    echo "$line $when $load"
  done
done
