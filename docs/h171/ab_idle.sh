#!/bin/sh
# h171: idle cost of the readings refresh counting the scrape timeout (base = main, br = branch),
# alternated base br br base; each run: loadtest.bench_idle_cpu --replicas 4 --window 10.
# Usage: flock /tmp/kinference-bench.lock docs/h171/ab_idle.sh OUT   (copies in /tmp/h171/{base,br})
set -e
out=$1; mkdir -p "$out"; py=/work/wt/h171/.venv/bin/python
i=0
for side in base br br base; do
  i=$((i + 1))
  echo "$(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg) run $i $side" >> "$out/log"
  (cd /tmp/h171/$side && PYTHONPATH=. $py -m loadtest.bench_idle_cpu --replicas 4 --window 10 \
    --label "$side" > "$out/$i-$side.txt" 2>&1)
done
echo "$(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg) end" >> "$out/log"
