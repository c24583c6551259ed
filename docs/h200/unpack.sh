#!/bin/bash
# the kept runs (docs/h200/runs/tN, gzipped) back into /tmp/h200/runs/tN for the scripts here
cd "$(dirname "$0")/runs"
for d in t*; do
  mkdir -p /tmp/h200/runs/$d/pages
  for f in $(find $d -name '*.gz'); do gunzip -c $f > /tmp/h200/runs/${f%.gz}; done
done
