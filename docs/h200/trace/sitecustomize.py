"""h200's scratch tracer (not product code): with H200_TRACE=<prefix> set and PYTHONPATH
holding this directory, a `kinference gateway` process writes one JSON line per local
decision into <prefix>.<pid>.jsonl: the time (perf_counter), the chosen endpoint, the
decision's own figures (`LocalChoice`: prompt and predicted cached tokens, predicted TTFT
and wait, sequences joined) and, just before the decision, the worker table as the router
saw it (in flight and pending prefill tokens per endpoint)."""

import os
import sys

_PREFIX = os.environ.get("H200_TRACE")
_ARGV = getattr(sys, "orig_argv", sys.argv)
if _PREFIX and "kinference" in _ARGV and "gateway" in _ARGV:
    import atexit
    import json
    import time

    from kinference.kvcache import source as _source
    from kinference.routing import router as _router
    from kinference.routing.plugins import cached as _cached

    _vectors: list = []  # the cached-tokens arrays the decision made (filled in place)

    _orig_lazily = _source.PreciseCachedTokens.match_lazily

    def match_lazily(self, query, slots, *, lazy=True):
        out = _orig_lazily(self, query, slots, lazy=lazy)
        _vectors.append(("p", slots.tolist(), out[0]))
        return out

    _source.PreciseCachedTokens.match_lazily = match_lazily
    _orig_approx = _cached.ApproximateCachedTokens.cached_tokens

    def cached_tokens(self, query, slots):
        out = _orig_approx(self, query, slots)
        _vectors.append(("a", slots.tolist(), out))
        return out

    _cached.ApproximateCachedTokens.cached_tokens = cached_tokens

    _rows: list = []
    _path = f"{_PREFIX}.{os.getpid()}.jsonl"

    def _dump():
        rows = _rows[:]
        del _rows[:]
        if rows:
            with open(_path, "a") as f:
                for r in rows:
                    f.write(json.dumps(r) + "\n")

    atexit.register(_dump)
    _orig = _router.Router.route

    def route(self, query):
        t = time.perf_counter()
        table = self.table
        n = len(table.endpoints)
        before = {
            e: [float(table.inflight[i]), float(table.pending_prefill[i])]
            for i, e in enumerate(table.endpoints[:n])
        }
        del _vectors[:]
        decision = _orig(self, query)
        # the precise source's vector where it ran (it asks the approximate one first)
        cand = {}
        kinds = [v[0] for v in _vectors]
        if _vectors:
            _, slots, values = _vectors[kinds.index("p") if "p" in kinds else 0]
            cand = {table.endpoints[s]: float(v) for s, v in zip(slots, values.tolist())}
        local = decision.local
        if local is not None:
            _rows.append(
                {
                    "t": t,
                    "ep": local.endpoint,
                    "prompt": local.prompt_tokens,
                    "cached": local.cached_tokens,
                    "ttft": local.predicted_ttft_ms,
                    "wait": local.predicted_wait_ms,
                    "seq": local.sequences,
                    "code": decision.code.name,
                    "w": before,
                    "c": cand,
                    "ck": "".join(kinds),
                }
            )
            if len(_rows) % 10 == 0:  # the learned rates now and then
                rates = self.learning.rates
                learned = {}
                for name in ("prefill_ms_per_token", "prefill_base_ms", "service_ms"):
                    arr = rates.peek(local.model, name)
                    if arr is not None:
                        learned[name] = {
                            e: float(arr[i]) for i, e in enumerate(table.endpoints) if i < len(arr)
                        }
                learned["busy_ms"] = rates.busy_ms(local.model)
                _rows[-1]["rates"] = learned
            if len(_rows) >= 20:
                _dump()
        return decision

    _router.Router.route = route

# In the load generator (`-m loadtest.bench_routing`) with H200_PAGES=<dir>: each engine's
# metrics page and each frontend's (the engine's HTTP endpoint) saved before and after each
# row's requests, to compare the engines' and frontends' own TTFT and tokenizer time.
_PAGES = os.environ.get("H200_PAGES")
if _PAGES and "loadtest.bench_routing" in _ARGV:
    import asyncio as _asyncio
    import itertools as _it

    from loadtest.routing_bench import fleets as _fleets
    from loadtest.routing_bench import runner as _runner

    _seen: list = []
    _calls = _it.count()
    _init = _fleets.Engines.__init__

    def _keep(self, *a, **kw):
        _init(self, *a, **kw)
        _seen.append(self)

    _fleets.Engines.__init__ = _keep
    _orig_read = _runner.read_counters

    async def read_counters(http, metrics_urls, counters):
        n = next(_calls)
        engines = _seen[-1] if _seen else None
        urls = list(metrics_urls) + ([f"{u}/metrics" for u in engines.urls] if engines else [])
        pages = await _asyncio.gather(*(http.get(u) for u in urls), return_exceptions=True)
        os.makedirs(_PAGES, exist_ok=True)
        with open(f"{_PAGES}/pages.{n}.txt", "w") as f:
            for u, p in zip(urls, pages):
                f.write(f"### {u}\n")
                f.write(p.text if hasattr(p, "text") else f"error {p!r}\n")
        return await _orig_read(http, metrics_urls, counters)

    _runner.read_counters = read_counters
