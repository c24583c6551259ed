"""Per-event CPU of the relay path (Relay.body over an in-memory response), µs per event."""

import asyncio, json, sys, time
from kinference.gateway.relay import Relay
from kinference.gateway.timing import TokenClock


def ev(i):
    doc = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": f"tok{i} "}, "finish_reason": None}],
    }
    return f"data: {json.dumps(doc)}\n\n".encode()


EVENTS = [ev(i) for i in range(100)] + [b"data: [DONE]\n\n"]


class Up:
    status = 200
    decoded = False

    def __init__(self):
        self.headers = [("content-type", "text/event-stream")]
        self.drained = False
        self._i = 0

    def header(self, name):
        return "text/event-stream" if name == "content-type" else ""

    async def chunks(self):
        while (c := await self.next_chunk()) is not None:
            yield c

    async def next_chunk(self):
        i = self._i
        if i >= len(EVENTS):
            return None
        self._i = i + 1
        self.drained = self._i == len(EVENTS)
        return EVENTS[i]

    def close(self):
        pass


class Rep:
    def first_token(self, *a):
        pass

    def final(self, *a):
        pass

    def abort(self, *a):
        pass


async def one():
    r = Relay(Up(), TokenClock(), Rep(), fallback_model="m", max_whole_bytes=1 << 20)
    await r.start()
    async for _ in r.body():
        pass
    r.finish()


async def main():
    for _ in range(200):
        await one()
    best = []
    for rep in range(7):
        t0 = time.thread_time()
        n = 300
        for _ in range(n):
            await one()
        best.append((time.thread_time() - t0) / (n * len(EVENTS)) * 1e6)
    print(
        sys.argv[1],
        "us/event per rep:",
        " ".join(f"{b:.2f}" for b in best),
        "min",
        f"{min(best):.2f}",
    )


asyncio.run(main())
