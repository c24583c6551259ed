"""h195's scratch tracer (not product code): with H195_TRACE=<prefix> set and PYTHONPATH
holding this directory, a `kinference gateway` process stamps each request's way to its first
token, and the loop's and tokenizer thread's work meanwhile, into <prefix>.<pid>.jsonl.

Per request (key = push): push in/out, body bytes, the Pick in/out, ready (parse +
tokenization) in/out, each tokenization part (decode of messages, template render, tokenizer
start, foreground advance) with its thread, the decision, dispatch (TokenClock made) and first
token seen. Globally: background tokenizer slices, KV-event steps on the loop, loop lags
(a 2 ms sleeper's overshoot > 0.5 ms)."""

import os
import sys

_PREFIX = os.environ.get("H195_TRACE")
_ARGV = getattr(sys, "orig_argv", sys.argv)
if _PREFIX and "kinference" in _ARGV and "gateway" in _ARGV:
    import asyncio
    import atexit
    import contextvars
    import json
    import threading
    import time

    _pc = time.perf_counter
    _cur: contextvars.ContextVar = contextvars.ContextVar("h195", default=None)
    _tl = threading.local()
    _reqs: list = []
    _glob: list = []
    _bodies: dict = {}
    _lock = threading.Lock()
    _path = f"{_PREFIX}.{os.getpid()}.jsonl"
    _mon = [False]
    _loop_thread = [None]

    def _dump():
        with _lock:
            reqs, glob = _reqs[:], _glob[:]
            del _reqs[:], _glob[:]
        if not reqs and not glob:
            return
        with open(_path, "a") as f:
            for r in reqs:
                f.write(json.dumps(r) + "\n")
            for g in glob:
                f.write(json.dumps(g) + "\n")

    atexit.register(_dump)

    async def _monitor():
        last_dump = _pc()
        while True:
            t = _pc()
            await asyncio.sleep(0.002)
            lag = _pc() - t - 0.002
            if lag > 0.0005:
                _glob.append({"g": "lag", "t": t + 0.002, "d": lag})
            if _pc() - last_dump > 2.0:
                last_dump = _pc()
                _dump()

    def _key():
        k = _tl.__dict__.get("key")
        return k if k is not None else _cur.get()

    _tt = time.thread_time

    def _part(name, fn):
        def wrapped(*a, **kw):
            t, c = _pc(), _tt()
            try:
                return fn(*a, **kw)
            finally:
                k = _key()
                if k is not None:
                    k.setdefault("parts", []).append(
                        [
                            name,
                            t,
                            _pc() - t,
                            threading.current_thread() is _loop_thread[0],
                            _tt() - c,
                        ]
                    )

        return wrapped

    from kinference.gateway import local as _local
    from kinference.gateway import timing as _timing
    from kinference import service as _service
    from kinference import preparation as _prep
    from kinference.tokenize import prepare as _tprep
    from kinference.tokenize import template as _tmpl
    from kinference.tokenize import lazy as _lazy
    from kinference.kvevents import subscriber as _sub

    _orig_push = _local.LocalPicker.push

    async def push(self, chunks, **kw):
        if not _mon[0]:
            _mon[0] = True
            _loop_thread[0] = threading.current_thread()
            asyncio.get_running_loop().create_task(_monitor())
        k = {"push_in": _pc()}
        _cur.set(k)
        with _lock:
            _reqs.append(k)
        sid = await _orig_push(self, chunks, **kw)
        k["push_out"] = _pc()
        k["sid"] = sid
        return sid

    _local.LocalPicker.push = push

    _orig_pick = _local.LocalPicker.pick

    async def pick(self, stream_id, ask):
        k = _cur.get()
        if k is not None:
            k["pick_in"] = _pc()
        try:
            return await _orig_pick(self, stream_id, ask)
        finally:
            if k is not None:
                k["pick_out"] = _pc()

    _local.LocalPicker.pick = pick

    _orig_begin = _prep.PickPreparation.begin

    def begin(self, stream_id, body):
        k = _cur.get()
        if k is not None:
            k["bytes"] = body.size
            k["begin"] = _pc()
            _bodies[id(body)] = k
        return _orig_begin(self, stream_id, body)

    _prep.PickPreparation.begin = begin

    _orig_ready = _prep.PickPreparation.ready

    async def ready(self, stream_id, body):
        k = _cur.get()
        if k is not None:
            k["ready_in"] = _pc()
        try:
            return await _orig_ready(self, stream_id, body)
        finally:
            if k is not None:
                k["ready_out"] = _pc()

    _prep.PickPreparation.ready = ready

    _orig_decide = _service.PickerService._decide

    def _decide(self, body, *a, **kw):
        t, c = _pc(), _tt()
        try:
            return _orig_decide(self, body, *a, **kw)
        finally:
            k = _cur.get()
            if k is not None:
                k["decide"] = [t, _pc() - t, _tt() - c]

    _service.PickerService._decide = _decide

    _orig_run = _tprep.PromptPreparer._run

    def _run(self, plan, pools, request, body, begun, **kw):
        k = _bodies.get(id(body))
        _tl.key = k
        t, c = _pc(), _tt()
        try:
            out = _orig_run(self, plan, pools, request, body, begun, **kw)
            return out
        finally:
            if k is not None:
                k.setdefault("parts", []).append(
                    [
                        "run" + ("_inline" if kw.get("inline") else ""),
                        t,
                        _pc() - t,
                        threading.current_thread() is _loop_thread[0],
                        _tt() - c,
                    ]
                )
            _tl.key = None

    _tprep.PromptPreparer._run = _run
    _tprep.prompt_text = _part("decode", _tprep.prompt_text)
    _tmpl.ChatTemplate.render = _part("render", _tmpl.ChatTemplate.render)
    _tprep.PromptPreparer._start = _part("start", _tprep.PromptPreparer._start)
    _lazy.Tokenization.advance = _part("advance", _lazy.Tokenization.advance)

    _orig_finish = _tprep.PromptPreparer._finish

    def _finish(self, begun, refs, ticket):
        t, c = _pc(), _tt()
        try:
            return _orig_finish(self, begun, refs, ticket)
        finally:
            _glob.append({"g": "bg", "t": t, "d": _pc() - t, "c": _tt() - c, "chars": begun.chars})

    _tprep.PromptPreparer._finish = _finish

    _orig_steps = _sub.EventSubscriber.steps

    def steps(self, feed, parts, caught_up=True):
        gen = _orig_steps(self, feed, parts, caught_up)
        size = sum(len(p) for p in parts)

        def wrapper():
            while True:
                t, c = _pc(), _tt()
                try:
                    next(gen)
                except StopIteration as stop:
                    _glob.append(
                        {
                            "g": "ev",
                            "t": t,
                            "d": _pc() - t,
                            "c": _tt() - c,
                            "b": size,
                            "slot": feed.slot,
                        }
                    )
                    return stop.value
                _glob.append(
                    {
                        "g": "ev",
                        "t": t,
                        "d": _pc() - t,
                        "c": _tt() - c,
                        "b": size,
                        "slot": feed.slot,
                    }
                )
                yield

        return wrapper()

    _sub.EventSubscriber.steps = steps

    _orig_tc_init = _timing.TokenClock.__init__

    def tc_init(self, *a, **kw):
        _orig_tc_init(self, *a, **kw)
        self._h195 = _cur.get()
        if self._h195 is not None:
            self._h195["dispatch"] = _pc()

    _timing.TokenClock.__init__ = tc_init
    _orig_token = _timing.TokenClock.token

    def token(self):
        first = _orig_token(self)
        k = getattr(self, "_h195", None)
        if first and k is not None:
            k["first"] = _pc()
        return first

    _timing.TokenClock.token = token

    if os.environ.get("H195_PROF"):
        import cProfile
        import pstats

        _profs = {n: cProfile.Profile() for n in ("ev", "decide", "tok")}

        def _profiled(name, fn):
            prof = _profs[name]

            def wrapped(*a, **kw):
                if threading.current_thread() is not _loop_thread[0]:
                    return fn(*a, **kw)
                prof.enable()
                try:
                    return fn(*a, **kw)
                finally:
                    prof.disable()

            return wrapped

        _w_steps = _sub.EventSubscriber.steps

        def steps2(self, feed, parts, caught_up=True):
            gen = _w_steps(self, feed, parts, caught_up)
            prof = _profs["ev"]

            def wrapper():
                while True:
                    prof.enable()
                    try:
                        next(gen)
                    except StopIteration as stop:
                        return stop.value
                    finally:
                        prof.disable()
                    yield

            return wrapper()

        _sub.EventSubscriber.steps = steps2
        _service.PickerService._decide = _profiled("decide", _service.PickerService._decide)
        _tprep.PromptPreparer._run = _profiled("tok", _tprep.PromptPreparer._run)

        def _pdump():
            for n, prof in _profs.items():
                with open(f"{_PREFIX}.{os.getpid()}.{n}.prof.txt", "w") as f:
                    pstats.Stats(prof, stream=f).sort_stats("tottime").print_stats(40)
                    pstats.Stats(prof, stream=f).sort_stats("cumulative").print_stats(40)

        atexit.register(_pdump)
