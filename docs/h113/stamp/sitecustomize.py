"""h113 scratch: in a `kinference gateway` process (H113_STAMP=FILE), time the Pick's steps in
thread CPU and append per-step medians to FILE every 100 Picks and at exit."""

import os, sys

if os.environ.get("H113_STAMP") and "gateway" in " ".join(sys.argv):
    import atexit, functools, importlib, statistics, time

    out = os.environ["H113_STAMP"]
    acc, per = {}, {}
    tt = time.thread_time_ns
    from h113common import wrap_specs

    SPECS = (
        "kinference.api.convert:pick_call_of kinference.api.convert:pick_response "
        "kinference.api.convert:pick_extras kinference.preparation:parsed_body "
        "kinference.service:PickerService._decided kinference.routing.router:Router.route "
        "kinference.service:PickerService._dispatch kinference.routing.blocks:PrefixHasher.hashes "
        "kinference.routing.worker_choice:WorkerChoice._context kinference.routing.plugins.pipeline:Pipeline.choose "
        + os.environ.get("H113_MORE", "")
    ).split()
    wrap_specs(SPECS, acc)
    import kinference.gateway.local as local

    orig = local.LocalPicker.pick

    def dump():
        if not per:
            return
        with open(out, "a") as fh:
            n = len(per["TOTAL"])
            fh.write(f"pid {os.getpid()} picks {n}\n")
            for key, v in sorted(per.items(), key=lambda kv: -statistics.median(kv[1])):
                fh.write(
                    f"  {key:40s} median {statistics.median(v):7.1f} mean {statistics.fmean(v):7.1f}\n"
                )

    async def pick(self, *a, **k):
        acc.clear()
        t = tt()
        r = await orig(self, *a, **k)
        acc["TOTAL"] = tt() - t
        for key, v in acc.items():
            per.setdefault(key, []).append(v / 1000)
        return r

    local.LocalPicker.pick = pick
    atexit.register(dump)
    import signal

    def term(*_):
        dump()
        per.clear()
        os._exit(0)

    signal.signal(signal.SIGTERM, term)
