#!/bin/bash
# A/B of the picker's loop stalls (h180): docs/h180/ab.sh OUT PY SIDE... -- BENCH ARGS
# Each SIDE is a tree (git archive + built native .so), optionally followed by bench
# arguments of its own after commas (DIR,--picker-nice,-10); each run: the bench from that
# tree with the h180 probe in its picker processes (DIR OUT/<n>-<side>), its --json beside it.
out=$1; py=$2; shift 2
sides=(); while [ "$1" != "--" ]; do sides+=("$1"); shift; done; shift
probe=${H180_PROBE:-$(cd "$(dirname "$0")" && pwd)/watch}  # H180_PROBE: another probe dir (h181)
mkdir -p "$out"; n=0
for spec in "${sides[@]}"; do
  IFS=, read -r -a parts <<< "$spec"; side=${parts[0]}; own=("${parts[@]:1}")
  n=$((n + 1)); tag=$n-$(basename "$side")$(printf '%s' "${own[@]}"); mkdir -p "$out/$tag"
  echo "$tag start $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
  (cd "$side" && H180_WATCH="$out/$tag" PYTHONPATH="$probe:$side" timeout 120 "$py" -m loadtest.bench_precise_pick "$@" "${own[@]}" --json "$out/$tag.json" > "$out/$tag.out" 2> "$out/$tag.err")
  echo "$tag end $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg) rc $?"
done
