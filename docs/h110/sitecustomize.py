# h110 scratch probes: perf_counter_ns (CLOCK_MONOTONIC, shared by processes) at socket-level
# events of the client, the gateway and the simulated engines. Not product code.
import os, sys, time, gc, importlib.abc, importlib.util

_OUT = os.environ.get("H110_PROBE")


def _role():
    try:
        with open("/proc/self/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return None
    s = b" ".join(argv)
    if b"bench_routing" in s:
        return "cli"
    if b"engine_host" in s:
        return "eng"
    if b"kinference" in s and b"gateway" in s:
        return "gw"
    return None


ROLE = _role() if _OUT else None
if ROLE:
    _fd = os.open(f"{_OUT}/{ROLE}.{os.getpid()}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    _pc = time.perf_counter_ns
    _tt = time.thread_time_ns

    def log(*fields):
        os.write(_fd, (" ".join(str(x) for x in (_pc(), _tt()) + fields) + "\n").encode())

    _PORTS = {}

    def _gccb(phase, info):
        log("gc" + ("0" if phase == "start" else "1"), info.get("generation"))

    gc.callbacks.append(_gccb)

    def _peer(self):
        p = _PORTS.get(id(self))
        if p is None:
            try:
                p = self.transport.get_extra_info("peername")[1]
            except Exception:
                p = -1
            _PORTS[id(self)] = p
        return p

    def patch_uvicorn(mod):
        cls = mod.HttpToolsProtocol
        orig = cls.data_received
        tag = "grx" if ROLE == "gw" else "erx"

        def data_received(self, data, _o=orig):
            log(tag, _peer(self), len(data))
            _o(self, data)
            log(tag + "1", _peer(self))

        cls.data_received = data_received

    def patch_joined(mod):
        cls = mod.HeadJoiningTransport
        orig = cls.write

        def write(self, data, _o=orig):
            t = _PORTS.get(id(self))
            if t is None:
                try:
                    t = self._transport.get_extra_info("peername")[1]
                except Exception:
                    t = -1
                _PORTS[id(self)] = t
            first = b'"content":"' in data if isinstance(data, (bytes, bytearray)) else False
            log("gcw", t, len(data), int(first))
            _o(self, data)

        cls.write = write
        oc = mod.HeadJoiningProtocol.connection_made

        def connection_made(self, transport, _o=oc):
            log("gacc")
            _o(self, transport)

        mod.HeadJoiningProtocol.connection_made = connection_made

    def patch_conn(mod):
        cls = mod.Conn
        ow = cls.write

        async def write(self, data, timeout_s, _o=ow):
            p = _PORTS.get(id(self))
            if p is None:
                try:
                    p = self.transport.get_extra_info("sockname")[1]
                except Exception:
                    p = -1
                _PORTS[id(self)] = p
            log("guw", p, len(data))
            await _o(self, data, timeout_s)
            log("guw1", p)

        cls.write = write
        orx = cls.data_received

        def data_received(self, data, _o=orx):
            p = _PORTS.get(id(self), -1)
            log("gurx", p, len(data))
            _o(self, data)

        cls.data_received = data_received

    def patch_service(mod):
        cls = mod.EngineService
        orid = cls._request_id

        def _request_id(self, prefix, _o=orid):
            rid = _o(self, prefix)
            log("eid", rid)
            return rid

        cls._request_id = _request_id
        ost = cls._stream

        async def _stream(self, job, reply, _o=ost):
            first = True
            async for chunk in _o(self, job, reply):
                if first:
                    log("efirst", reply._head["id"])
                    first = False
                yield chunk

        cls._stream = _stream

    def patch_anyio(mod):
        cls = mod.AnyIOStream
        ow = cls.write

        async def write(self, buffer, timeout=None, _o=ow):
            await _o(self, buffer, timeout)
            try:
                p = self._stream.extra(__import__("anyio").abc.SocketAttribute.local_port)
            except Exception:
                p = -1
            log("csend", p, len(buffer))

        cls.write = write

    def patch_stream(mod):
        orig = mod.stream_chat

        async def stream_chat(client, url, body, started, on_first=None, _o=orig):
            r = await _o(client, url, body, started, on_first)
            log(
                "cres",
                r.response_id,
                int(started * 1e9),
                int((started + r.ttft_s) * 1e9),
                r.cached_tokens,
                r.prompt_tokens,
            )
            return r

        mod.stream_chat = stream_chat
        d = sys.modules.get("loadtest.routing_bench.drivers")
        if d is not None:
            d.stream_chat = stream_chat

    def patch_drivers(mod):
        s = sys.modules.get("loadtest.routing_bench.stream")
        if s is not None:
            mod.stream_chat = s.stream_chat

    PATCHES = {
        "uvicorn.protocols.http.httptools_impl": patch_uvicorn,
        "kinference.gateway.joined": patch_joined,
        "kinference.gateway.http1_conn": patch_conn,
        "loadtest.sim_engine.service": patch_service,
        "httpcore._backends.anyio": patch_anyio,
        "loadtest.routing_bench.stream": patch_stream,
        "loadtest.routing_bench.drivers": patch_drivers,
    }

    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            fn = PATCHES.get(name)
            if fn is None:
                return None
            sys.meta_path.remove(self)
            try:
                spec = importlib.util.find_spec(name)
            finally:
                sys.meta_path.insert(0, self)
            if spec is None or spec.loader is None:
                return None
            loader = spec.loader
            oexec = loader.exec_module

            def exec_module(module, _o=oexec, _fn=fn):
                _o(module)
                _fn(module)

            loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _Finder())
