#!/bin/bash
# h196: run "$@" under the bench lock, logging UTC and 1-min load before and after to /tmp/h196/locked.log
{
  flock 9
  echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) START $*" >> /tmp/h196/locked.log
  "$@"
  rc=$?
  echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) END rc $rc" >> /tmp/h196/locked.log
} 9>/tmp/kinference-bench.lock
