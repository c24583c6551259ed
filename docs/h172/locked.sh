#!/bin/bash
# usage: flock /tmp/kinference-bench.lock docs/h172/locked.sh TAG cmd...  (UTC and load, inside the lock)
tag=$1; shift
echo "$tag start $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> /tmp/h172/lock.log
"$@"; rc=$?
echo "$tag end $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg) rc=$rc" >> /tmp/h172/lock.log
exit $rc
