#!/bin/bash
# whole.sh TAG ARGS... : the whole suite in the h175 worktree, pytest ARGS (e.g. -n 2 or -n 0)
tag=$1; shift
cd /work/wt/h175
rm -rf .hypothesis
l0=$(cut -d' ' -f1 /proc/loadavg); t0=$(date -u +%H:%M:%S)
out=/tmp/h175/whole-$tag.jsonl; rm -f $out
H175_OUT=$out PYTHONPATH=docs/h175 /usr/bin/time -f "%e %U %S" -o $out.time .venv/bin/python -m pytest -q -p cputime -p no:cacheprovider "$@" > $out.log 2>&1
rc=$?
l1=$(cut -d' ' -f1 /proc/loadavg)
read e u s < $out.time
echo "$tag start=$t0 load=$l0->$l1 rc=$rc wall=$e cpu=$(python3 -c "print(round($u+$s,1))") $(tail -1 $out.log)"
