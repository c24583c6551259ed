"""h184 scratch probe (not product code): each Pick's candidates and the TTFT model's terms,
and each KV-event batch's removed blocks, one JSON line each, on the monotonic clock.

`install(path)` patches the picker's classes in this process; `sitecustomize.py` beside it
calls it in a `kinference gateway` process when H184_TRACE=DIR is set (the routing bench's
gateways inherit the environment); `mocker.py` calls it in the mocker bench's process.
"""

import json
import threading
import time

TAGS: dict = {}


def install(path: str) -> None:
    from kinference.kvcache import index as IX
    from kinference.routing import router as RT
    from kinference.routing.scorers import ttft as T
    from kinference.routing.scorers.ttft_small import small_terms

    out = open(path, "a", buffering=1)
    local = threading.local()
    pc = time.perf_counter

    def write(kind: str, rec: dict) -> None:
        out.write(json.dumps({"k": kind, **TAGS, **rec}) + "\n")

    def terms(self, ctx):  # the same values as the C form (tests/native hold them equal)
        try:
            pr, wa, own, sw, un, ar = small_terms(self.config, self.rates, self._ms_per_token, ctx)
            return dict(
                eps=[ctx.table.endpoints[i] for i in ctx.slots.tolist()],
                cached=[float(x) for x in ctx.cached_tokens],
                seq=[float(x) for x in ctx.sequences] if ctx.sequences is not None else None,
                pred=pr,
                wait=wa,
                own=own,
                slot=sw,
                unsure=un,
                arr=ar,
                tokens=float(ctx.prompt_tokens),
                pending=[float(ctx.table.pending_prefill[i]) for i in ctx.slots.tolist()],
                inflight=[float(ctx.table.inflight[i]) for i in ctx.slots.tolist()],
                mem_ahead=ctx.memory_ahead,
                mem_batch=ctx.memory_batch,
            )
        except Exception as e:  # noqa: BLE001
            return {"err": repr(e)}

    of_choose = T.TtftScorer.choose_small

    def choose_small(self, ctx, weight, home, ids, guard=None):
        r = of_choose(self, ctx, weight, home, ids, guard)
        rec = getattr(local, "rec", None)
        if rec is not None and r is not None:
            rec["cand"] = terms(self, ctx)
            rec["index"] = int(r[0])
            rec["totals"] = [float(x) for x in r[1]]
        return r

    T.TtftScorer.choose_small = choose_small

    of_score = T.TtftScorer.score

    def score(self, ctx):
        s = of_score(self, ctx)
        rec = getattr(local, "rec", None)
        if rec is not None:
            rec["cand"] = terms(self, ctx)
            rec["scores"] = [float(x) for x in s]
        return s

    T.TtftScorer.score = score

    of_route = RT.Router.route

    def route(self, query):
        local.rec = rec = {"t0": pc(), "c0": time.thread_time()}
        try:
            d = of_route(self, query)
        finally:
            local.rec = None
        rec["t1"] = pc()
        rec["cpu"] = (time.thread_time() - rec.pop("c0")) * 1e3
        if d.local is not None:
            rec["ep"] = d.local.endpoint
            rec["pred"] = d.local.predicted_cached_tokens
            rec["ptok"] = d.local.prompt_tokens
        rec["reason"] = str(getattr(d, "code", ""))
        write("pick", rec)
        return d

    RT.Router.route = route

    def timed(cls, name, label):
        of = getattr(cls, name)

        def wrapper(*a, **k):
            rec = getattr(local, "rec", None)
            if rec is None:
                return of(*a, **k)
            t = pc()
            try:
                return of(*a, **k)
            finally:
                ms = rec.setdefault("ms", {})
                ms[label] = ms.get(label, 0.0) + (pc() - t) * 1e3

        setattr(cls, name, wrapper)

    from kinference.kvcache import pool as PL
    from kinference.kvcache import precise as PR
    from kinference.kvcache import source as SR

    timed(SR.PreciseCachedTokens, "match", "source")
    timed(PR.PreciseCaches, "match", "match")
    timed(PR.PreciseCaches, "routed", "routed")
    timed(PL.PoolCaches, "surviving", "surviving")
    timed(PL.PoolCaches, "room", "room")
    timed(PL.PoolCaches, "extend", "extend")
    timed(IX.BlockIndex, "longest", "longest")
    from kinference.ops import recorder as RC

    of_prefix = RC.RequestRecorder._prefix

    def _prefix(self, local, prompt_tokens, cached_tokens):
        if local is not None and local.predicted_cached_tokens is not None:
            write(
                "final",
                {
                    "t": pc(),
                    "ep": local.endpoint,
                    "pred": local.predicted_cached_tokens,
                    "cached": cached_tokens,
                    "prompt": prompt_tokens,
                    "ptok": local.prompt_tokens,
                },
            )
        return of_prefix(self, local, prompt_tokens, cached_tokens)

    RC.RequestRecorder._prefix = _prefix
    of_apply = IX.BlockIndex.apply

    def apply(self, slot, events):
        a = of_apply(self, slot, events)
        if a.removed or a.cleared:
            write(
                "ev",
                {
                    "t": pc(),
                    "slot": slot,
                    "removed": len(a.removed),
                    "cleared": bool(a.cleared),
                    "held": self.blocks(slot),
                },
            )
        return a

    IX.BlockIndex.apply = apply
