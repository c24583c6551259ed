#!/bin/sh
# Alternated A/B runs under the bench lock: `git archive` copies in /tmp/h205/<side> (a: main
# d0465f5, b: the branch 65a52d7, c: the branch at b4654ea, the socket change only, f: a9ac7f5,
# the socket change and the one-pass cuts), each with
# its extension built, the same benchmark file run against each (PYTHONPATH); one JSON line
# a run, with its UTC and 1-min load.
#   docs/h205/ab.sh "a b" FIRST LAST OUT BENCH.py [ARGS...]
set -e
PY=/work/wt/h205/.venv/bin/python
SIDES=$1; FIRST=$2; LAST=$3; OUT=$4; BENCH=$5; shift 5
for i in $(seq "$FIRST" "$LAST"); do
  for side in $SIDES; do
    when=$(date -u +%H:%M:%S); load=$(cut -d' ' -f1 /proc/loadavg)
    lock="flock /tmp/kinference-bench.lock"; [ -n "$H205_LOCKED" ] && lock=""  # ab_block.sh's
    line=$(cd /tmp && PYTHONPATH=/tmp/h205/$side $lock \
      timeout 360 $PY "$BENCH" /work/wt/h205/docs/h201/mocker_batches.msgpack "$@" --tag "$side-$i")
    echo "$line $when $load" >> "$OUT"
    echo "$line $when $load"
  done
done
