#!/bin/sh
# Usage (inside one `flock /tmp/kinference-bench.lock`): ab.sh OUT ARGS -- ARM_DIR...
# Runs `python -m loadtest.bench_precise_pick ARGS` from each ARM_DIR (a built `git archive`
# copy, PYTHONPATH = it) in the order given; stderr of run i in OUT/i-ARM.txt with the UTC
# time and the 1-minute load before it.
out=$1; shift; args=""
while [ "$1" != "--" ]; do args="$args $1"; shift; done; shift
py=${PYTHON:-/work/wt/h168/.venv/bin/python}
mkdir -p "$out"; i=0
for dir in "$@"; do
  i=$((i + 1)); file="$out/$i-$(basename "$dir").txt"
  { date -u +%T; cut -d' ' -f1 /proc/loadavg; } > "$file"
  (cd "$dir" && PYTHONPATH="$dir" "$py" -m loadtest.bench_precise_pick $args) 2>> "$file" > /dev/null
done
date -u +%T >> "$out/$i-$(basename "$dir").txt"
