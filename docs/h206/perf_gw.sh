#!/bin/bash
# h206: the bench run with `perf record` on the kinference gateway process for 15 s of its
# measured slice (Python 3.11: no perf trampolines, so frames show as the interpreter's C
# functions; the split user/kernel and syscall/loop costs is what this is for).
# $1 output dir; run from a tree whose .venv/PYTHONPATH is set by the caller.
out=$1; mkdir -p $out
python -m loadtest.bench_gateway_streams --systems kinference --rates 6 --duration 20 \
  --rounds 1 --max-tokens 100 --stream-step-s 0.001 > $out/bench.txt 2>&1 &
bench=$!
for i in $(seq 1 600); do
  pid=$(pgrep -f -n -- "kinference gateway --listen" || true)
  [ -n "$pid" ] && break
  sleep 0.1
done
# the engine-direct slice (~25 s incl. warm-ups) comes first; then the gateway's
sleep 30
perf record -F 999 -g -p $pid -o $out/perf.data -- sleep 15 > $out/perf.log 2>&1
wait $bench
