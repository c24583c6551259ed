"""h179: thread-CPU stamps around the Pick's phases (inclusive), the same in the gateway
(docs/h179/watch) and in process (docs/h179/pickcpu.py). `install()` patches them and
returns `take()`: the last Pick's {phase: ns}, cleared (call it once per decision)."""

import os
import time


def install():
    from kinference import preparation as P
    from kinference import service as S
    from kinference.routing import blocks as B
    from kinference.routing import router as R
    from kinference.routing import worker_choice as W
    from kinference.routing.plugins import pipeline as PL

    tt = time.thread_time_ns
    acc = {}

    def wrap(owner, name, label):
        of = getattr(owner, name)

        def timed(*a, **k):
            t0 = tt()
            try:
                return of(*a, **k)
            finally:
                acc[label] = acc.get(label, 0) + tt() - t0

        setattr(owner, name, timed)

    def twice(owner, name, label):  # a pure step run again at once: its cost warm, in situ
        of = getattr(owner, name)

        def timed(*a, **k):
            t0 = tt()
            out = of(*a, **k)
            t1 = tt()
            of(*a, **k)
            acc[label] = acc.get(label, 0) + t1 - t0
            acc[label + "_again"] = acc.get(label + "_again", 0) + tt() - t1
            return out

        setattr(owner, name, timed)

    if os.environ.get("H179_TWICE"):
        twice(P, "parsed_body", "parse")
        twice(R.Router, "_signals", "signals")
    else:
        wrap(P, "parsed_body", "parse")
        wrap(R.Router, "_signals", "signals")
    wrap(R.Router, "route", "route")
    wrap(W.WorkerChoice, "_context", "context")
    wrap(B.PrefixHasher, "hashes", "hashes")
    wrap(W.WorkerChoice, "_local_unless", "choice")
    wrap(PL.Pipeline, "_choose_fused", "fused")
    wrap(S.PickerService, "_dispatch", "dispatch")

    def take():
        out = dict(acc)
        acc.clear()
        return out

    return take
