"""Routing quality: kinference against cache-blind and cache-aware routers, simulated engines.

    python -m loadtest.bench_routing [--quick] [--out docs/benchmarks.md]

The code lives in `loadtest.routing_bench`; see its `main` module for what is measured.
"""

from __future__ import annotations

import sys

from loadtest.routing_bench.main import main

if __name__ == "__main__":
    sys.exit(main())
