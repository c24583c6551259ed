# h184 scratch: with H184_TRACE=DIR, a `kinference gateway` process traces its Picks
# (`probe.py`) into DIR/gw.<pid>.jsonl; the routing bench process writes each replay's start.
import os
import sys

if os.environ.get("H184_TRACE"):
    _argv = " ".join(sys.argv)
    if "gateway" in _argv and "--regime" not in _argv:
        import probe

        probe.install(f"{os.environ['H184_TRACE']}/gw.{os.getpid()}.jsonl")
        if os.environ.get("H184_NOREPLAY"):  # the experiment: no eviction prediction
            from kinference.kvcache import pool as _pool

            _of_init = _pool.PoolCaches.__init__

            def _init(self, *a, **k):
                _of_init(self, *a, **k)
                self.predict_evictions = False

            _pool.PoolCaches.__init__ = _init
    elif "--regime" in _argv:
        import json
        import time

        from loadtest.routing_bench import replay as _rp

        _bench = open(f"{os.environ['H184_TRACE']}/bench.{os.getpid()}.jsonl", "a", buffering=1)
        _of_run = _rp.Replay.run

        async def _run(self, conversations):
            try:
                return await _of_run(self, conversations)
            finally:
                _bench.write(
                    json.dumps(
                        {"start": self._start, "end": time.perf_counter(), "n": len(self.samples)}
                    )
                    + "\n"
                )

        _rp.Replay.run = _run
