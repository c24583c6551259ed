#!/bin/sh
# docs/h205/ab.sh's runs, alternated, all under ONE hold of the bench lock (short runs: the
# lock's queue, not the runs, took most of the time). Same arguments as ab.sh.
exec flock /tmp/kinference-bench.lock env H205_LOCKED=1 "$(dirname "$0")/ab.sh" "$@"
