#!/bin/bash
# h110: seeds 3-6 under both routers, then kinference with 2 s engine-metrics scrapes, probed.
# Run from the repository root under the bench lock: flock /tmp/kinference-bench.lock docs/h110/run23.sh
set -u
T='{"engine_metrics": {"interval_s": 2.0, "timeout_s": 0.5, "stale_after_s": 10.0}}'
mkdir -p /tmp/h110/run2 /tmp/h110/run3
cat /proc/loadavg; date
env H110_PROBE=/tmp/h110/run2 PYTHONPATH=docs/h110 timeout 200 .venv/bin/python -m loadtest.bench_routing --regime vllm-64 --routers kinference,sglang --rates 6 --duration 10 --seeds 3,4,5,6 --requests /tmp/h110/run2/req.jsonl --out /tmp/h110/run2/out.md > /tmp/h110/run2/stdout 2>&1
cat /proc/loadavg; date
env H110_PROBE=/tmp/h110/run3 PYTHONPATH=docs/h110 timeout 120 .venv/bin/python -m loadtest.bench_routing --regime vllm-64 --routers kinference --rates 6 --duration 10 --seeds 3,4,5,6 --tuning "$T" --requests /tmp/h110/run3/req.jsonl --out /tmp/h110/run3/out.md > /tmp/h110/run3/stdout 2>&1
cat /proc/loadavg; date
