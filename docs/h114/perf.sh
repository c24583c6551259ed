#!/bin/bash
# usage: perf.sh TREE OUTPREFIX INFLIGHT DURATION  -- runs the bench on TREE, perf record on the gateway
TREE=$1; OUT=$2; INF=$3; DUR=$4
cd $TREE
PYTHONPATH=$TREE /work/wt/h114/.venv/bin/python -m loadtest.bench_gateway_streams --systems kinference \
  --in-flight $INF --time-scale 0.1 --max-tokens 8 --duration $DUR --rounds 1 > $OUT.table 2> $OUT.err &
BENCH=$!
GW=""
for i in $(seq 1 200); do
  for p in $(pgrep -P $BENCH); do
    if tr '\0' ' ' < /proc/$p/cmdline | grep -q "kinference gateway"; then GW=$p; fi
  done
  [ -n "$GW" ] && break
  sleep 0.1
done
echo "gateway pid $GW" >&2
sleep 4  # warm-up (1 s of arrivals per system + start)
perf record -F 2000 -g -p $GW -o $OUT.perf -- sleep $((DUR*2)) >/dev/null 2>$OUT.perferr &
wait $BENCH
wait
cat $OUT.table
