"""h173 scratch probe: h147's gateway trace (docs/h147/sitecustomize.py, loaded as it is)
plus the socket-level stamps of the hop, on the same monotonic clock.

With H147_TRACE=DIR and PYTHONPATH=docs/h173:<tree>, a `kinference gateway` process adds to
each of h147's per-request records (gw.PID.jsonl): `arr`, the read that brought the request
head (uvicorn's data_received); `connect`, a new upstream connection made for it; `uw`, its
upstream writes; `ub`, the upstream response's first read; `cw`, the client-side socket
writes; `sched`, the loop thread's /proc schedstat (CPU ns, run-queue wait ns) at arr, flow,
disp, ub and the first client write after the first token; `wall`, time.time() - pc
(H173_NO_TICKER=1: without h147's 1-ms loop-lag ticker, which wakes the loop 1,000 times a
second). The
routing bench process writes one line per request (client.PID.jsonl): the client's send and
first token on the same clock.
"""

import importlib.util
import os
import sys

_D = os.environ.get("H147_TRACE")
_ARGV = " ".join(sys.argv)


def _h147():  # h147's probe, run as a module of its own
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "h147", "sitecustomize.py")
    spec = importlib.util.spec_from_file_location("h147_probe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sched_reader():
    fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)

    def read():
        cpu, wait, _ = os.pread(fd, 64, 0).split()
        return int(cpu), int(wait)

    return read


def _gateway(probe) -> None:
    import time

    pc, cur, sched = time.perf_counter, probe.cur, _sched_reader()
    if os.environ.get("H173_NO_TICKER"):
        probe._started["task"] = None  # h147's 1-ms loop-lag ticker is not started
    _inbound(pc, cur, sched)
    _upstream(pc, cur, sched)
    _client_writes(pc, cur, sched)


def _inbound(pc, cur, sched) -> None:
    import contextvars
    import time

    from uvicorn.protocols.http import httptools_impl as H

    from kinference.gateway import flow as F
    from kinference.gateway import timing as TM

    arrived = contextvars.ContextVar("h173_arr", default=None)
    of_data = H.HttpToolsProtocol.data_received

    def data_received(self, data):
        reads = self.__dict__.get("h173_reads", 0)  # 0: a new client connection's first
        self.h173_reads = reads + 1
        arrived.set((pc(), sched(), len(data), reads))  # copied into the task made for a head
        return of_data(self, data)

    H.HttpToolsProtocol.data_received = data_received
    of_run = F.Flow.run

    async def run(self, incoming):
        arr, at_flow = arrived.get(), sched()
        try:
            return await of_run(self, incoming)
        finally:
            rec = cur.get()
            if rec is not None:
                rec["arr"], rec["wall"] = arr, time.time() - pc()
                rec.setdefault("sched", {})["flow"] = at_flow

    F.Flow.run = run
    of_clock = TM.TokenClock.__init__

    def clock_init(self, *a, **k):
        of_clock(self, *a, **k)
        rec = cur.get()
        if rec is not None:
            rec.setdefault("sched", {})["disp"] = sched()

    TM.TokenClock.__init__ = clock_init


def _upstream(pc, cur, sched) -> None:
    from kinference.gateway import http1 as C
    from kinference.gateway import http1_conn as CC

    of_connect = C.HttpClient._connect

    async def connect(self, origin):
        t0 = pc()
        conn = await of_connect(self, origin)
        rec = cur.get()
        if rec is not None:  # a spare opened in the background is stamped too
            rec.setdefault("connect", []).append((t0, pc()))
        return conn

    C.HttpClient._connect = connect
    of_write = CC.Conn.write

    async def write(self, data, timeout_s):
        rec = cur.get()
        if rec is not None:
            self.h173 = rec
            rec.setdefault("uw", []).append((pc(), len(data)))
        return await of_write(self, data, timeout_s)

    CC.Conn.write = write
    of_up = CC.Conn.data_received

    def up_received(self, data):
        rec = getattr(self, "h173", None)
        if rec is not None and "ub" not in rec:
            rec["ub"] = (pc(), len(data))
            rec.setdefault("sched", {})["ub"] = sched()
        return of_up(self, data)

    CC.Conn.data_received = up_received


def _client_writes(pc, cur, sched) -> None:
    from kinference.gateway import joined as J

    def client_write(rec, size):
        if rec is not None and len(rec.setdefault("cw", [])) < 6:
            rec["cw"].append((pc(), size))
            if "first" in rec and "cw_first" not in rec["sched"]:
                rec["sched"]["cw_first"] = sched()

    of_jwrite, of_flush = J.HeadJoiningTransport.write, J.HeadJoiningTransport.flush

    def jwrite(self, data):
        held = self._held
        if held is not None or not self._hold:
            client_write(cur.get(), len(data) + (len(held) if held else 0))
        return of_jwrite(self, data)

    def flush(self):
        if self._held is not None:
            client_write(cur.get(), len(self._held))
        return of_flush(self)

    J.HeadJoiningTransport.write, J.HeadJoiningTransport.flush = jwrite, flush


def _bench() -> None:
    import contextvars
    import json
    import time

    from httpcore._async import connection as HC
    from httpcore._backends import anyio as A

    from loadtest.routing_bench import drivers

    socket_io = contextvars.ContextVar("h173_io", default=None)
    of_write, of_read = A.AnyIOStream.write, A.AnyIOStream.read

    async def io_write(self, buffer, timeout=None):  # noqa: ASYNC109 (httpcore's own)
        if (io := socket_io.get()) is not None:
            io.setdefault("w", []).append((time.perf_counter(), len(buffer)))
        return await of_write(self, buffer, timeout)

    async def io_read(self, max_bytes, timeout=None):  # noqa: ASYNC109 (httpcore's own)
        data = await of_read(self, max_bytes, timeout)
        if (io := socket_io.get()) is not None and len(io.setdefault("r", [])) < 4:
            io["r"].append((time.perf_counter(), len(data)))
        return data

    A.AnyIOStream.write, A.AnyIOStream.read = io_write, io_read
    of_connect = HC.AsyncHTTPConnection._connect

    async def connect(self, request):
        t0 = time.perf_counter()
        stream = await of_connect(self, request)
        if (io := socket_io.get()) is not None:
            io.setdefault("c", []).append((t0, time.perf_counter()))
        return stream

    HC.AsyncHTTPConnection._connect = connect

    out = open(f"{_D}/client.{os.getpid()}.jsonl", "a", buffering=1)  # noqa: SIM115 (for life)
    plain = drivers.stream_chat

    async def stream_chat(client, url, body, started, on_first=None):
        called, io = time.perf_counter(), {}
        socket_io.set(io)
        result = await plain(client, url, body, started, on_first)
        line = {"url": url, "started": started, "called": called, "ttft": result.ttft_s,
                "total": result.total_s, "id": result.response_id, "bytes": len(body),
                **io}  # fmt: skip
        out.write(json.dumps(line) + "\n")
        return result

    drivers.stream_chat = stream_chat


if _D and "gateway" in _ARGV:
    _gateway(_h147())
elif _D and "--regime" in _ARGV:
    _h147()
    _bench()
