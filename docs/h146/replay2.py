"""bench_pick_replay at N endpoints (argv[1]); the rest of argv to its main."""

import sys
import loadtest.bench_pick_replay as b

n = int(sys.argv[1])
b.ENDPOINTS = tuple(f"127.0.0.1:{9101 + i}" for i in range(n))
sys.exit(b.main(sys.argv[2:]))
