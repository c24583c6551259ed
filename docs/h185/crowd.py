"""A crowd of mixed clients at once against a gateway; then what it still holds."""

import asyncio, json, random, sys, time, collections, urllib.request

PORT = int(sys.argv[1])
N = int(sys.argv[2])
METRICS = sys.argv[3:]
M = "meta-llama/Llama-3.1-8B-Instruct"


def req(stream, model=M, content="hi", max_tokens=8):
    body = json.dumps(
        {
            "model": model,
            "stream": stream,
            "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": content}],
        }
    ).encode()
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
        % len(body),
        body,
    )


async def client(kind, results):
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", PORT)
    except OSError as exc:
        results[(kind, "connect " + type(exc).__name__)] += 1
        return
    try:
        if kind == "whole":
            head, body = req(False)
            writer.write(head + body)
        elif kind == "stream":
            head, body = req(True, max_tokens=32)
            writer.write(head + body)
        elif kind == "hangup-before-pick":
            head, body = req(True)
            writer.write(head + body[:10])
            await writer.drain()
            await asyncio.sleep(random.random() * 0.2)
            writer.transport.abort()
            results[(kind, "done")] += 1
            return
        elif kind == "hangup-after-body":
            head, body = req(True, max_tokens=64)
            writer.write(head + body)
            await writer.drain()
            await asyncio.sleep(random.random() * 0.05)
            writer.transport.abort()
            results[(kind, "done")] += 1
            return
        elif kind == "hangup-mid-stream":
            head, body = req(True, max_tokens=64)
            writer.write(head + body)
            await reader.readuntil(b"data:")
            writer.transport.abort()
            results[(kind, "done")] += 1
            return
        elif kind in ("evil-reset", "evil-429", "evil-999", "evil-huge"):
            head, body = req(
                True,
                model="evil",
                content={
                    "evil-reset": "reset",
                    "evil-429": "429",
                    "evil-999": "status999",
                    "evil-huge": "hugeusage",
                }[kind],
            )
            writer.write(head + body)
        elif kind == "bad-json":
            body = b'{"model": "' + M.encode() + b'", "messages": [' * 3
            writer.write(
                b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n"
                % len(body)
                + body
            )
        elif kind == "garbage":
            writer.write(
                b"POST /v1/chat/completions HTTP/1.1\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab"
            )
        elif kind == "crlf-idle":
            writer.write(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
            await reader.readuntil(b'"ok"}')
            writer.write(b"\r\n")
        writer.write_eof() if kind in () else None
        await writer.drain()
        async with asyncio.timeout(60):
            data = await reader.read(65536)
            status = (
                data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/") else repr(data[:20])
            )
            # read the rest (a close follows for 'connection: close' or the keep-alive timeout)
            if kind == "crlf-idle":
                await reader.read()
                status = "closed"
            else:
                while not (
                    b"[DONE]" in data
                    or (
                        not data.endswith(b"\n\n")
                        and b"content-length" in data.lower()
                        and data.endswith(b"}")
                    )
                ):
                    more = await reader.read(65536)
                    if not more:
                        break
                    data += more
        results[(kind, status)] += 1
    except Exception as exc:
        results[(kind, type(exc).__name__)] += 1
    finally:
        writer.transport.abort()


KINDS = [
    "whole",
    "stream",
    "hangup-before-pick",
    "hangup-after-body",
    "hangup-mid-stream",
    "evil-reset",
    "evil-429",
    "evil-999",
    "evil-huge",
    "bad-json",
    "garbage",
    "crlf-idle",
]


async def main():
    results = collections.Counter()
    t = time.monotonic()
    await asyncio.gather(*(client(KINDS[i % len(KINDS)], results) for i in range(N)))
    print(f"{N} clients in {time.monotonic() - t:.1f}s")
    for key in sorted(results):
        print("  ", key, results[key])


asyncio.run(main())
