#!/bin/bash
# A/B: main copy /tmp/h195/a vs branch copy /tmp/h195/b, precise row only, alternated, seeds 1,2;
# each run under the bench lock. $1: first index, $2: last index.
for i in $(seq $1 $2); do
  seed=$(( (i % 2) + 1 ))
  if [ $(( (i / 2) % 2 )) = 0 ]; then order="a b"; else order="b a"; fi
  for side in $order; do
    ROUTERS=kinference-precise flock /tmp/kinference-bench.lock /work/wt/h195/docs/h195/run.sh /tmp/h195/$side ab-$side-$i $seed
  done
done
