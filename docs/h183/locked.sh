#!/bin/bash
# locked.sh ARGS...: docs/h183/ab.sh ARGS under the bench lock, its wait and hold logged.
echo "wait $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) :: $*" >> /tmp/h183/out/lock.txt
flock /tmp/kinference-bench.lock bash -c 'echo "got  $(date -u +%H:%M:%S)" >> /tmp/h183/out/lock.txt; '"$(dirname "$0")"'/ab.sh "$@"; echo "left $(date -u +%H:%M:%S)" >> /tmp/h183/out/lock.txt' _ "$@"
