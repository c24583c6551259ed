#!/bin/bash
# h196 A/B: A = shipped defaults, B = engine_metrics.interval_s 1.0 (--tuning), kinference alone,
# 3 req/s on Dynamo's mockers, seeds 1,2 per command, commands alternated A B A B ..., each under the lock.
cd /work/wt/h196
for i in "$@"; do
  docs/h196/locked.sh docs/h196/decomp2.sh /tmp/h196/A$i 1,2
  docs/h196/locked.sh docs/h196/decomp2.sh /tmp/h196/B$i 1,2 '{engine_metrics: {interval_s: 1.0}}'
done
