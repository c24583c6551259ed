"""h157: where the in-process gateway's CPU per request goes, one process, one thread
(inproc.py's loop): the whole loop through the gateway, the same client straight to the
canned engine (what the harness itself costs), and thread-CPU stamps around the Pick, the
first and final reports and the gateway's metrics. Run from inside a tree, PYTHONPATH=tree."""

import asyncio, builtins, sys, time, runpy, collections

T = collections.Counter()
C = collections.Counter()


def stamp(cls, name, key):
    orig = getattr(cls, name)
    if asyncio.iscoroutinefunction(orig):

        async def w(*a, **k):
            t = time.thread_time_ns()
            try:
                return await orig(*a, **k)  # the Pick does not wait in this loop (small bodies)
            finally:
                ph = getattr(builtins, "H157_PHASE", "other")
                T[ph, key] += time.thread_time_ns() - t
                C[ph, key] += 1
    else:

        def w(*a, **k):
            t = time.thread_time_ns()
            try:
                return orig(*a, **k)
            finally:
                ph = getattr(builtins, "H157_PHASE", "other")
                T[ph, key] += time.thread_time_ns() - t
                C[ph, key] += 1

    setattr(cls, name, w)


from kinference.gateway import local, metrics

stamp(local.LocalPicker, "pick", "pick (LocalPicker.pick)")
stamp(local.LocalPicker, "push", "push (LocalPicker.push)")
stamp(local.LocalReports, "first_token", "first-token report")
stamp(local.LocalReports, "final", "final report")
stamp(metrics.GatewayMetrics, "relayed", "gateway metrics")
from kinference.gateway import guard, http1_conn, flow

stamp(guard.GuardedProtocol, "data_received", "client bytes in: uvicorn parse + task made")
stamp(http1_conn.Conn, "data_received", "upstream bytes in: llhttp + wake")
sys.argv = ["inproc", "1500", "3"]
mod = runpy.run_path("/tmp/h157/inproc.py", run_name="h157inproc")
for ph, key in sorted(T):
    if ph != "other":
        print(
            f"stamp {ph} | {key}: {T[ph, key] / C[ph, key] / 1000:.1f} us per call, {C[ph, key]} calls"
        )
