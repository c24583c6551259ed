#!/bin/bash
# alternated A/B of bench_gateway (kinference only); each run under the bench lock
for side in base br br base base br; do
  now=$(date -u +%H:%M)
  if [[ "$now" > "17:04" ]]; then echo "stop at $now"; break; fi
  i=$((i+1))
  cd /tmp/h185-$side
  flock /tmp/kinference-bench.lock bash -c "echo \"$side start \$(date -u +%H:%M:%S) load \$(cut -d' ' -f1 /proc/loadavg)\" >> /tmp/h185/ab_log.txt; PYTHONPATH=/tmp/h185-$side timeout 340 /work/wt/h185/.venv/bin/python -m loadtest.bench_gateway --rounds 1 --requests-1 100 --requests-16 2000 --systems kinference > /tmp/h185/ab_${i}_$side.txt 2>&1; echo \"$side end \$(date -u +%H:%M:%S) load \$(cut -d' ' -f1 /proc/loadavg)\" >> /tmp/h185/ab_log.txt"
done
