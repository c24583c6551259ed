#!/bin/bash
# h209: pairs A B B A A B B A ..., seed 1 then 2 alternating per pair; $@ = pair numbers.
for i in "$@"; do
  seed=$(( (i - 1) % 2 + 1 ))
  if [ $(( i % 2 )) -eq 1 ]; then order="A B"; else order="B A"; fi
  for s in $order; do /work/wt/h209/docs/h209/run.sh $s $seed $s$i; done
done
