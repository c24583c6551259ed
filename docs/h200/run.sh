#!/bin/bash
# one routing-bench run of tree $1 (a git-archive copy with its extension built), tag $2, seed $3;
# $4 = "trace" loads docs/h200/trace (decisions into $d/trace.*.jsonl). Run under the bench lock.
tree=$1; tag=$2; seed=$3; d=/tmp/h200/runs/$tag; mkdir -p $d
py=/work/wt/h200/.venv/bin/python
extra=""
if [ "$4" = trace ]; then
  export H200_PAGES=$d/pages
  extra=/work/wt/h200/docs/h200/trace:
  export H200_TRACE=$d/trace
fi
echo "start $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)" > $d/times
cd $tree
PYTHONPATH=$extra$tree $py -m loadtest.bench_routing --regime dynamo --routers ${ROUTERS:-kinference,kinference-precise} \
  --rates 3 --duration 60 --seed $seed --dynamo /tmp/dynamo-venv --dynamo-model /tmp/dynamo-model \
  --json $d/run.json --requests $d/req.jsonl --out $d/out.md > $d/log 2>&1
rc=$?
echo "end $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) rc $rc" >> $d/times
