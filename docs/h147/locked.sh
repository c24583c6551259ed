#!/bin/bash
# Historical (h147, 2026-12-07): ran on main `0069989`. The probes here patch
# functions that have since changed or gone; kept as the record of docs/benchmarks.md's
# `## h147` section, not maintained (run on `0069989`).
# usage: locked.sh TAG cmd...  (run under flock by the caller); logs UTC + load
TAG=$1; shift
echo "$TAG start $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)" >> /tmp/h147/lock.log
"$@"
rc=$?
echo "$TAG end $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) rc=$rc" >> /tmp/h147/lock.log
