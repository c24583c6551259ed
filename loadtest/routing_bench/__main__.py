"""`python -m loadtest.routing_bench` (alias `python -m loadtest.bench_routing`)."""

from __future__ import annotations

import sys

from loadtest.routing_bench.main import main

if __name__ == "__main__":
    sys.exit(main())
