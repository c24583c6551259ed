#!/bin/bash
# usage: docs/h189/route_pair.sh "base br" OUTDIR   (one pair, each under its own lock hold)
# The routing bench's precise row, Dynamo regime, 6 req/s, 60 s, seed 1, shipped defaults;
# base = main c7cd200 (/tmp/h189-base), br = branch (/tmp/h189-br), fresh processes.
ORDER=$1; OUT=$2; mkdir -p "$OUT"
for side in $ORDER; do
  if [ $side = base ]; then P=/tmp/h189-base; else P=/tmp/h189-br; fi
  tag="$side-$(date -u +%H%M%S)"
  flock /tmp/kinference-bench.lock bash -c "
    echo \"$tag start \$(date -u +%T) load \$(cut -d' ' -f1 /proc/loadavg)\" >> $OUT/lock.log
    cd $P && PYTHONPATH=$P timeout 360 /work/wt/h189/.venv/bin/python -m loadtest.bench_routing \
      --regime dynamo --routers kinference-precise --rates 6 --duration 60 --seeds 1 \
      --json $OUT/$tag.json --out $OUT/$tag.md > $OUT/$tag.log 2>&1
    echo \"$tag end \$(date -u +%T) load \$(cut -d' ' -f1 /proc/loadavg) rc=\$?\" >> $OUT/lock.log"
done
