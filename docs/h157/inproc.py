"""h157: the in-process gateway's CPU per request, one process, one thread: a raw client, the
gateway (hosted picker, shipped defaults) and a canned upstream on one uvloop loop. Prints CPU
µs per request (process CPU over N requests, best and median of reps) for whole and streamed
replies at 1 and 16 in flight. Run from inside a tree with PYTHONPATH=the tree."""

import asyncio, os, socket, sys, tempfile, time, json, gc, statistics

os.environ["KINFERENCE_METRICS_LISTEN"] = ""
import logging

logging.disable(logging.WARNING)
from prometheus_client import CollectorRegistry
from kinference.config import load_policy
from kinference.gateway.app import build_app
from kinference.gateway.backends import load_backends
from kinference.gateway.embedded import picker_opener
from kinference.gateway.server import GatewayServer
from kinference.gateway.settings import load_gateway_settings
from kinference.settings import load_settings

MODEL = "sim-model"


def sse(n):
    ev = []
    head = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": MODEL}
    ev.append(
        {
            **head,
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
            ],
        }
    )
    for i in range(n):
        ev.append(
            {
                **head,
                "choices": [{"index": 0, "delta": {"content": f" tok{i}"}, "finish_reason": None}],
            }
        )
    ev.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    ev.append(
        {
            **head,
            "choices": [],
            "usage": {"prompt_tokens": 250, "completion_tokens": n, "total_tokens": 250 + n},
        }
    )
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in ev) + b"data: [DONE]\n\n"
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    )


def whole():
    body = json.dumps(
        {
            "id": "c1",
            "object": "chat.completion",
            "created": 1,
            "model": MODEL,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "x " * 16},
                    "finish_reason": "length",
                }
            ],
            "usage": {"prompt_tokens": 250, "completion_tokens": 16, "total_tokens": 266},
        }
    ).encode()
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )


SSE, WHOLE = sse(16), whole()


class Engine(asyncio.Protocol):
    def connection_made(self, t):
        self.t = t
        self.buf = b""

    def data_received(self, d):
        self.buf += d
        while True:
            i = self.buf.find(b"\r\n\r\n")
            if i < 0:
                return
            head = self.buf[:i].lower()
            n = int(head.split(b"content-length:")[1].split(b"\r\n")[0])
            if len(self.buf) < i + 4 + n:
                return
            body = self.buf[i + 4 : i + 4 + n]
            self.buf = self.buf[i + 4 + n :]
            self.t.write(SSE if b'"stream":true' in body else WHOLE)


class Client(asyncio.Protocol):
    def __init__(self):
        self.buf = b""
        self.done = None

    def connection_made(self, t):
        self.t = t

    def data_received(self, d):
        self.buf += d
        i = self.buf.find(b"\r\n\r\n")
        if i < 0:
            return
        head = self.buf[:i].lower()
        if b"content-length:" in head:
            n = int(head.split(b"content-length:")[1].split(b"\r\n")[0])
            if len(self.buf) >= i + 4 + n:
                self._end(self.buf[:12])
        elif self.buf.endswith(b"0\r\n\r\n"):
            self._end(self.buf[:12])

    def _end(self, status):
        self.buf = b""
        if self.done and not self.done.done():
            self.done.set_result(status)

    async def ask(self, req):
        self.done = asyncio.get_running_loop().create_future()
        self.t.write(req)
        status = await self.done
        assert status == b"HTTP/1.1 200", status


def request(stream):
    body = json.dumps(
        {
            "model": MODEL,
            "messages": [
                {
                    "role": "user",
                    "content": "Summarise the following notes. "
                    + "lorem ipsum dolor sit amet " * 40,
                }
            ],
            "max_tokens": 16,
            "stream": stream,
        }
    ).encode()
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\naccept: */*\r\n"
        b"user-agent: h157\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    )


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def main(n, reps):
    loop = asyncio.get_running_loop()
    eng = await loop.create_server(Engine, "127.0.0.1", 0)
    eport = eng.sockets[0].getsockname()[1]
    tmp = tempfile.mkdtemp()
    pol = os.path.join(tmp, "p.yaml")
    open(pol, "w").write(
        f'pools:\n  - {{namespace: default, name: chat, endpoints: ["127.0.0.1:{eport}"], models: ["{MODEL}"]}}\n'
    )
    settings = load_gateway_settings({"listen": "127.0.0.1:0"})
    psettings = load_settings({"config": pol, "listen": f"127.0.0.1:{free_port()}"})
    registry = CollectorRegistry()
    app = build_app(
        settings,
        load_backends(settings.backends_file),
        None,
        picker=picker_opener(
            settings, psettings, load_policy(__import__("pathlib").Path(pol)), registry
        ),
        registry=registry,
    )
    server = GatewayServer(app, settings.listen)
    await server.start()
    clients = []
    for _ in range(16):
        _, c = await loop.create_connection(Client, "127.0.0.1", server.port)
        clients.append(c)
    reqs = {k: request(k == "streamed") for k in ("whole", "streamed")}

    async def run(kind, conc, count):
        per = count // conc

        async def one(c):
            for _ in range(per):
                await c.ask(reqs[kind])

        await asyncio.gather(*(one(c) for c in clients[:conc]))
        return per * conc

    for kind in reqs:  # warm
        await run(kind, 16, 800)
        await run(kind, 1, 200)
    gc.collect()
    res = {}
    for r in range(reps):
        for kind in reqs:
            for conc in (1, 16):
                import builtins

                builtins.H157_PHASE = f"{kind} @{conc}"
                t0 = time.process_time()
                done = await run(kind, conc, n)
                builtins.H157_PHASE = "other"
                res.setdefault((kind, conc), []).append((time.process_time() - t0) / done * 1e6)
    for (kind, conc), v in res.items():
        print(
            f"{kind} @{conc}: best {min(v):.1f} median {statistics.median(v):.1f} us/request (whole loop)"
        )
    for c in clients:
        c.t.close()
    await server.stop()
    eng.close()


async def direct(n, reps):
    """The same client straight to the canned engine: the harness's own CPU per request."""
    loop = asyncio.get_running_loop()
    eng = await loop.create_server(Engine, "127.0.0.1", 0)
    port = eng.sockets[0].getsockname()[1]
    clients = [(await loop.create_connection(Client, "127.0.0.1", port))[1] for _ in range(16)]
    reqs = {k: request(k == "streamed") for k in ("whole", "streamed")}
    for kind, req in reqs.items():
        for conc in (1, 16):
            best = []
            for _ in range(reps):
                t0 = time.process_time()
                per = n // conc

                async def one(c):
                    for _ in range(per):
                        await c.ask(req)

                await asyncio.gather(*(one(c) for c in clients[:conc]))
                best.append((time.process_time() - t0) / (per * conc) * 1e6)
            print(
                f"direct {kind} @{conc}: best {min(best):.1f} median {statistics.median(best):.1f} us/request"
            )
    for c in clients:
        c.t.close()
    eng.close()


import uvloop

n_, reps_ = (
    (int(sys.argv[1]) if len(sys.argv) > 1 else 2000),
    (int(sys.argv[2]) if len(sys.argv) > 2 else 3),
)
if __name__ in ("__main__", "h157inproc"):
    uvloop.run(main(n_, reps_))
if __name__ == "h157inproc":
    T, C = sys.modules["__main__"].__dict__.get("T"), None
    uvloop.run(direct(n_, reps_))
