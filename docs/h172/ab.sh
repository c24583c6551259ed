#!/bin/bash
# h172 A/B runner (run under flock): ab.sh WHAT OUTDIR SIDE...   sides = /tmp/h172/<side> copies
#   micro: docs/h172/replay.py on the captured bodies (/tmp/h172/t2), 2 rounds, seeds 1,2
#   e2e:   bench_routing --regime dynamo --routers kinference-precise --rates 3 --duration 12 --seeds 1,2
#   pick:  bench_precise_pick 64 KiB coldx1,chatx1 then 1 MiB chatx16,chat-spreadx16 (h165's rows)
what=$1; out=$2; shift 2; mkdir -p "$out"; n=0; py=/work/wt/h172/.venv/bin/python
echo "start $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> "$out/log"
for side in "$@"; do
  n=$((n+1)); cd "/tmp/h172/$side" || exit 1
  case $what in
    micro) PYTHONPATH=$PWD $py /work/wt/h172/docs/h172/replay.py /tmp/h172/t2 --rounds 2 --seeds 1,2 \
             --json "$out/$side-$n.json" > "$out/$side-$n.txt" 2>&1 ;;
    e2e) PYTHONPATH=$PWD timeout 170 $py -m loadtest.bench_routing --regime dynamo --routers kinference-precise \
           --rates 3 --duration 12 --seeds 1,2 --json "$out/$n-$side.json" --out "$out/$n-$side.md" \
           --requests "$out/$n-$side.jsonl" > "$out/$n-$side.txt" 2>&1 ;;
    pick) { PYTHONPATH=$PWD $py -m loadtest.bench_precise_pick --sizes 65536 --workloads coldx1,chatx1 --modes precise
            PYTHONPATH=$PWD $py -m loadtest.bench_precise_pick --sizes 1048576 --workloads chatx16,chat-spreadx16 --modes precise
          } > "$out/$n-$side.txt" 2>&1 ;;
  esac
  echo "$n $side rc=$? $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> "$out/log"
done
echo "end $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> "$out/log"
