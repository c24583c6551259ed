#!/bin/sh
# A/B of the precise Pick bench (docs/benchmarks.md, h176): ROUNDS rounds of base / branch /
# branch / base, each run in its own `git archive` copy (built with build_ext --inplace),
# JSON per run in OUT. Run it under the lock:
#   flock /tmp/kinference-bench.lock sh docs/h176/ab.sh ROUNDS OUT [bench args...]
rounds=$1 out=$2
shift 2
py=/work/wt/h176/.venv/bin/python
mkdir -p "$out"
for round in $(seq 1 "$rounds"); do
  for side in base branch branch base; do
    n=$(ls "$out" | grep -c "^$side-" || true)
    cd /tmp/h176/ab/$side || exit 1
    echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) $side $n" >&2
    PYTHONPATH=/tmp/h176/ab/$side timeout 300 $py -m loadtest.bench_precise_pick \
      --json "$out/$side-$n.json" "$@" >/dev/null 2>&1
  done
done
echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) end" >&2
