#!/bin/bash
# h196: the simulated regimes, A (defaults) and B (engine_metrics.interval_s 1.0), kinference alone,
# the regimes' three rates, 15 s of arrivals, seed 1; each command under the lock.
cd /work/wt/h196
for regime in few-slots vllm-64 mixed; do
  for side in A B; do
    d=/tmp/h196/sim-$regime-$side; mkdir -p $d
    args=()
    [ $side = B ] && args=(--tuning '{engine_metrics: {interval_s: 1.0}}')
    docs/h196/locked.sh env PYTHONPATH=$PWD .venv/bin/python -m loadtest.bench_routing --regime $regime \
      --routers kinference --duration 15 --seed 1 "${args[@]}" --json $d/run.json > $d/log 2>&1
  done
done
