#!/bin/bash
# h167: the 1 MiB x16 precise rows without and with the collection log (docs/h167/hook),
# ROUNDS rounds of plain/logged/logged/plain, then TRACED runs logged with --trace-stalls;
# one locked command. usage: runs.sh ROUNDS TRACED OUTDIR  (from the worktree's root)
R=$1; T=$2; OUT=$3; PY=$PWD/.venv/bin/python; mkdir -p "$OUT"; n=0
ARGS=(--sizes 1048576 --workloads chatx16,chat-spreadx16 --modes precise)
run() {  # run NAME LOGGED [EXTRA]
  n=$((n+1)); f="$OUT/$n-$1"; mkdir -p "$f"
  { echo "start $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
    if [ "$2" = 1 ]; then
      H167_GC_LOG=$f PYTHONPATH=$PWD/docs/h167/hook:$PWD $PY -m loadtest.bench_precise_pick "${ARGS[@]}" $3
    else
      PYTHONPATH=$PWD $PY -m loadtest.bench_precise_pick "${ARGS[@]}"
    fi
    echo "end $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"; } > "$f/out.txt" 2>&1
}
for r in $(seq 1 "$R"); do run plain 0; run logged 1; run logged 1; run plain 0; done
for t in $(seq 1 "$T"); do run traced 1 --trace-stalls; done
