#!/bin/bash
# h179's causal check: Dynamo 3 req/s, 60 s, kinference alone, watched (docs/h179/watch);
# arms "n" (the gateway's loop thread at normal priority) or "rt" (SCHED_FIFO 1, H179_RT=1).
# usage (in the worktree, under the lock): docs/h179/ab_rt.sh OUTDIR SEED arm arm ...
out=$1; seed=$2; shift 2
i=0
for arm in "$@"; do
  i=$((i + 1)); d=$out/$i-$arm; mkdir -p "$d"
  echo "run $i $arm seed $seed start $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
  rt=""; [ "$arm" = rt ] && rt=1
  H179_RT=$rt H179_WATCH=$d PYTHONPATH=docs/h179/watch:$PWD timeout 170 .venv/bin/python -m loadtest.bench_routing \
    --regime dynamo --rates 3 --duration 60 --routers kinference --seeds "$seed" \
    --json "$d/run.json" --requests "$d/req.jsonl" --out "$d/out.md" > "$d/stdout" 2>&1
  echo "run $i $arm end $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg) rc $?"
done
