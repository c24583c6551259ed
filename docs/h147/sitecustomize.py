# Historical (h147, 2026-12-07): ran on main `0069989`. The probes here patch
# functions that have since changed or gone; kept as the record of docs/benchmarks.md's
# `## h147` section, not maintained (run on `0069989`).
# h147 scratch probe. Active only in a `kinference gateway` process with H147_TRACE=DIR
# (one JSON line per request: stamps on one monotonic clock, the pick, the TTFT terms),
# and in the routing bench process (each replay's start on the same clock).
import os, sys

_argv = " ".join(sys.argv)
if os.environ.get("H147_TRACE") and "gateway" in _argv:
    import asyncio, contextvars, hashlib, json, time

    pc = time.perf_counter
    D = os.environ["H147_TRACE"]
    fh = open(f"{D}/gw.{os.getpid()}.jsonl", "a", buffering=1)
    cur = contextvars.ContextVar("h147", default=None)
    _started = {}
    from kinference.gateway import flow as F
    from kinference.gateway import relay as R
    from kinference.gateway import timing as TM
    from kinference import service as S
    from kinference import preparation as P
    from kinference.routing import router as RT
    from kinference.kvcache import precise as PR

    of_run = F.Flow.run

    async def run(self, incoming):
        rec = {"flow": pc()}
        cur.set(rec)
        if "task" not in _started:
            _started["task"] = asyncio.get_running_loop().create_task(_ticker())
        return await of_run(self, incoming)

    F.Flow.run = run

    of_pick = S.PickerService.pick_off_loop

    async def pick_off_loop(self, call):
        rec = cur.get()
        if rec is not None:
            rec["pick0"] = pc()
        try:
            return await of_pick(self, call)
        finally:
            if rec is not None:
                rec["pick1"] = pc()

    S.PickerService.pick_off_loop = pick_off_loop

    of_ready = P.PickPreparation.ready

    async def ready(self, stream_id, body):
        r = await of_ready(self, stream_id, body)
        rec = cur.get()
        if rec is not None:
            rec["ready"] = pc()
        return r

    P.PickPreparation.ready = ready

    of_decide = S.PickerService._decide

    def _decide(self, body, call, parsed, precise=None, translated=None):
        rec = cur.get()
        if rec is not None and not isinstance(parsed, str):
            seg = parsed.prompt.segments[-1] if parsed.prompt.segments else ""
            rec["key"] = hashlib.sha1(seg.encode()).hexdigest()[:12]
            rec["dec0"] = pc()
        r = of_decide(self, body, call, parsed, precise, translated)
        if rec is not None:
            rec["dec1"] = pc()
        return r

    S.PickerService._decide = _decide

    of_route = RT.Router.route

    def route(self, query):
        d = of_route(self, query)
        rec = cur.get()
        if rec is not None and d.local is not None:
            rec["ep"] = d.local.endpoint
            rec["pred"] = d.local.predicted_cached_tokens
            rec["ptok"] = d.local.prompt_tokens
        return d

    RT.Router.route = route

    of_match = PR.PreciseCaches.match

    def match(self, ref, prompt, slots, output_tokens=0):
        t0, c0 = pc(), time.thread_time()
        r = of_match(self, ref, prompt, slots, output_tokens)
        rec = cur.get()
        if rec is not None:
            rec["match_ms"] = rec.get("match_ms", 0.0) + (pc() - t0) * 1e3
        return r

    PR.PreciseCaches.match = match

    try:
        from kinference.routing.scorers import ttft as T
        from kinference.routing.scorers.ttft_small import small_terms

        of_small = T.TtftScorer._score_small

        def _score_small(self, ctx):
            s = of_small(self, ctx)
            rec = cur.get()
            if rec is not None:
                try:
                    pr, wa, own, sw, un, ar = small_terms(
                        self.config, self.rates, self._ms_per_token, ctx
                    )
                    rec["cand"] = dict(
                        eps=[ctx.table.endpoints[i] for i in ctx.slots.tolist()],
                        cached=ctx.cached_tokens.tolist(),
                        seq=(ctx.sequences.tolist() if ctx.sequences is not None else None),
                        pred=pr,
                        wait=wa,
                        own=own,
                        slot=sw,
                        unsure=un,
                        score=s.tolist(),
                        tokens=float(ctx.prompt_tokens),
                    )
                except Exception as e:
                    rec["cand_err"] = repr(e)
            return s

        T.TtftScorer._score_small = _score_small
    except Exception as e:
        print("h147 probe: no terms", e, file=sys.stderr)

    of_routed = PR.PreciseCaches.routed

    def routed(self, *a, **k):
        t0 = pc()
        r = of_routed(self, *a, **k)
        rec = cur.get()
        if rec is not None:
            rec["routed_ms"] = rec.get("routed_ms", 0.0) + (pc() - t0) * 1e3
        return r

    PR.PreciseCaches.routed = routed

    try:
        from kinference.kvevents import subscriber as SB

        ef = open(f"{D}/ev.{os.getpid()}.jsonl", "a", buffering=1)
        of_steps = SB.EventSubscriber.steps

        def steps(self, feed, parts, caught_up):
            it = of_steps(self, feed, parts, caught_up)
            t_start = pc()
            busy = 0.0
            value = None
            n = 0
            while True:
                t = pc()
                try:
                    y = it.send(value)
                except StopIteration as e:
                    busy += pc() - t
                    ef.write(
                        json.dumps(
                            [
                                t_start,
                                pc(),
                                busy * 1e3,
                                n,
                                feed.endpoint,
                                len(parts[2]) if len(parts) > 2 else 0,
                            ]
                        )
                        + "\n"
                    )
                    return e.value
                busy += pc() - t
                n += 1
                value = yield y

        SB.EventSubscriber.steps = steps
    except Exception as e:
        print("h147 probe: no subscriber timing", e, file=sys.stderr)

    try:
        from kinference.tokenize import worker as TW

        of_submit = TW.TokenizerThread.submit

        def submit(self, work):
            rec = cur.get()
            t_q = pc()
            box = {}

            def timed():
                box["run0"] = pc()
                c0 = time.thread_time()
                try:
                    return work()
                finally:
                    box["run1"] = pc()
                    box["cpu"] = (time.thread_time() - c0) * 1e3

            fut = of_submit(self, timed)
            if rec is not None:
                rec.setdefault("tok", []).append(("submit", t_q, box))
            return fut

        TW.TokenizerThread.submit = submit
        of_here = TW.TokenizerThread.here

        def here(self, work):
            rec = cur.get()
            t0 = pc()
            c0 = time.thread_time()
            r = of_here(self, work)
            if rec is not None:
                rec.setdefault("tok", []).append(
                    (
                        "here",
                        t0,
                        {
                            "run0": t0,
                            "run1": pc(),
                            "cpu": (time.thread_time() - c0) * 1e3,
                            "done": r is not None,
                        },
                    )
                )
            return r

        TW.TokenizerThread.here = here
    except Exception as e:
        print("h147 probe: no tokenizer timing", e, file=sys.stderr)

    of_clock = TM.TokenClock.__init__

    def clock_init(self, *a, **k):
        of_clock(self, *a, **k)
        rec = cur.get()
        if rec is not None:
            rec["disp"] = pc()

    TM.TokenClock.__init__ = clock_init
    of_token = TM.TokenClock.token

    def token(self):
        first = of_token(self)
        if first:
            rec = cur.get()
            if rec is not None:
                rec["first"] = pc()
        return first

    TM.TokenClock.token = token

    of_finish = R.Relay.finish

    def finish(self):
        rec = cur.get()
        if rec is not None and "end" not in rec:
            rec["end"] = pc()
            fh.write(json.dumps(rec) + "\n")
        return of_finish(self)

    R.Relay.finish = finish

    # Loop lag: a 1 ms ticker, each overshoot over 1 ms written with its time.
    lf = open(f"{D}/lag.{os.getpid()}.jsonl", "a", buffering=1)

    async def _ticker():
        while True:
            t = pc()
            await asyncio.sleep(0.001)
            late = pc() - t - 0.001
            if late > 0.001:
                lf.write(f"[{t:.6f},{late * 1e3:.3f}]\n")

elif os.environ.get("H147_TRACE") and "--regime" in _argv:
    import json, time
    from loadtest.routing_bench import replay as RP

    bf = open(f"{os.environ['H147_TRACE']}/bench.{os.getpid()}.jsonl", "a", buffering=1)
    of_rrun = RP.Replay.run

    async def rrun(self, conversations):
        try:
            return await of_rrun(self, conversations)
        finally:
            bf.write(json.dumps({"start": self._start, "n": len(self.samples)}) + "\n")

    RP.Replay.run = rrun
