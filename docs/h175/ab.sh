#!/bin/bash
# ab.sh TAG ORDER PATHS... : runs pytest on PATHS in /tmp/h175/{A,B} in ORDER (e.g. ABBA), one line per run
tag=$1; order=$2; shift 2
for side in $(echo $order | fold -w1); do
  cd /tmp/h175/$side
  rm -rf .hypothesis
  l0=$(cut -d' ' -f1 /proc/loadavg); t0=$(date -u +%H:%M:%S)
  out=/tmp/h175/ab-$tag-$side-$(date +%s).jsonl
  s=$(date +%s.%N)
  H175_OUT=$out PYTHONPATH=/tmp/h175/$side:/work/wt/h175/docs/h175 /work/wt/h175/.venv/bin/python -m pytest -q -p cputime -p no:cacheprovider -p no:xdist "$@" > $out.log 2>&1
  rc=$?
  e=$(date +%s.%N)
  l1=$(cut -d' ' -f1 /proc/loadavg)
  cpu=$(python3 -c "import json,sys; r=[json.loads(l) for l in open('$out')]; print(round(sum(x['cpu']+x['kids'] for x in r),1), len(r))")
  echo "$tag $side start=$t0 load=$l0->$l1 rc=$rc wall=$(python3 -c "print(round($e-$s,1))") cpu+kids,n=$cpu $(tail -1 $out.log)"
done
