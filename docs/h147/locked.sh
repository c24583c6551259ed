#!/bin/bash
# usage: locked.sh TAG cmd...  (run under flock by the caller); logs UTC + load
TAG=$1; shift
echo "$TAG start $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)" >> /tmp/h147/lock.log
"$@"
rc=$?
echo "$TAG end $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) rc=$rc" >> /tmp/h147/lock.log
