#!/bin/bash
# usage: ab.sh TAG "arm arm ..." -- runs bench_gateway_streams per arm (trees /tmp/h114-ARM), in order
TAG=$1; ARMS=$2; shift 2
mkdir -p /tmp/h114/ab/$TAG
for i in $(seq 1 $(echo $ARMS | wc -w)); do
  arm=$(echo $ARMS | cut -d' ' -f$i)
  echo "== $i $arm $(date +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
  cd /tmp/h114-$arm && PYTHONPATH=/tmp/h114-$arm timeout 100 /work/wt/h114/.venv/bin/python -m loadtest.bench_gateway_streams \
     --systems kinference --in-flight 1,16 --time-scale 0.1 --max-tokens 8 --duration 5 --rounds 1 "$@" \
     > /tmp/h114/ab/$TAG/$i-$arm.md 2>/dev/null
  grep "kinference" /tmp/h114/ab/$TAG/$i-$arm.md
done
echo "end $(date +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
