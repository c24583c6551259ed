#!/bin/bash
# h166: one bench_precise_pick command, its Picks in /tmp/h166/NAME.json, its time and load
# logged; the bench is cut at LIMIT_S (320 s). Run from the worktree, under the lock:
#   flock /tmp/kinference-bench.lock docs/h166/run.sh NAME BENCH-ARGS...
OUT=/tmp/h166; mkdir -p "$OUT"; name=$1; shift
start=$(date -u +%T); load=$(cut -d' ' -f1 /proc/loadavg)
timeout "${LIMIT_S:-320}" .venv/bin/python -m loadtest.bench_precise_pick --json "$OUT/$name.json" "$@" > "$OUT/$name.txt" 2>&1
rc=$?
echo "$name $start-$(date -u +%T) load $load -> $(cut -d' ' -f1 /proc/loadavg) rc $rc" >> "$OUT/times.log"
