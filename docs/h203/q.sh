#!/bin/bash
# quiet-machine rows on main: $1 tag, $2 seed
cd /work/main
tag=$1; seed=$2; d=/tmp/lead/runs/$tag; mkdir -p $d
echo "start $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)" > $d/times
.venv/bin/python -m loadtest.bench_routing --regime dynamo --routers kinference,kinference-precise \
  --rates 3 --duration 60 --seeds $seed --dynamo /tmp/dynamo-venv --dynamo-model /tmp/dynamo-model \
  --json $d/run.json --requests $d/req.jsonl --out $d/out.md > $d/log 2>&1
echo "end $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) rc $?" >> $d/times
