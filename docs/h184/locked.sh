#!/bin/bash
# usage: flock /tmp/kinference-bench.lock docs/h184/locked.sh TAG cmd...   (logs UTC + 1-min load)
TAG=$1; shift
echo "$TAG start $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)" >> /tmp/h184/lock.log
"$@"
rc=$?
echo "$TAG end $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) rc=$rc" >> /tmp/h184/lock.log
