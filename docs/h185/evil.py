"""An upstream that misbehaves as the request's user message says (mode word)."""

import asyncio, json, sys


def chunk(obj):
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def content(t):
    return {
        "id": "x",
        "object": "chat.completion.chunk",
        "model": "evil",
        "choices": [{"index": 0, "delta": {"content": t}, "finish_reason": None}],
    }


async def handle(reader, writer):
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        body = await reader.readexactly(length)
        mode = json.loads(body)["messages"][0]["content"]
        sys.stderr.write(f"mode {mode}\n")
        sse = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nx-request-id: upstream-id\r\n\r\n"
        if mode == "hugeusage":
            payload = (
                sse
                + chunk(content("hi"))
                + chunk(
                    {
                        "id": "x",
                        "model": "evil",
                        "choices": [],
                        "usage": {"prompt_tokens": 2**40, "completion_tokens": 1},
                    }
                )
                + b"data: [DONE]\n\n"
            )
            writer.write(payload)
            await writer.drain()
            writer.close()
            return
        if mode == "hugeusagejson":
            doc = json.dumps(
                {
                    "id": "x",
                    "object": "chat.completion",
                    "model": "evil",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "hi"},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 2**40, "completion_tokens": 2**70},
                }
            ).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                % (len(doc), doc)
            )
            await writer.drain()
            writer.close()
            return
        if mode == "bigmodel":
            doc = json.dumps(
                {
                    "id": "x",
                    "object": "chat.completion",
                    "model": "m" * (5 * 1024 * 1024),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "hi"},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 1},
                }
            ).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                % (len(doc), doc)
            )
            await writer.drain()
            writer.close()
            return
        if mode == "nonjson500":
            doc = b"<html>oops</html>"
            writer.write(
                b"HTTP/1.1 500 Internal\r\ncontent-type: text/html\r\ncontent-length: %d\r\n\r\n%s"
                % (len(doc), doc)
            )
            await writer.drain()
            writer.close()
            return
        if mode == "429":
            doc = b'{"error": {"message": "slow down"}}'
            writer.write(
                b"HTTP/1.1 429 Too Many\r\ncontent-type: application/json\r\nretry-after: 7\r\ncontent-length: %d\r\n\r\n%s"
                % (len(doc), doc)
            )
            await writer.drain()
            writer.close()
            return
        if mode == "malformed":
            writer.write(
                sse
                + b"data: {not json\n\n"
                + b"data: \xff\xfe\n\n"
                + chunk(content("ok"))
                + b"event: x\ndata: [DONE]\n\n"
            )
            await writer.drain()
            writer.close()
            return
        if mode == "noheaders":
            await asyncio.sleep(3600)
            return
        if mode == "status999":
            writer.write(b"HTTP/1.1 999 Weird\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()
            writer.close()
            return
        if mode == "endless":
            writer.write(sse)
            n = 0
            while True:
                writer.write(chunk(content("x" * 100)))
                await writer.drain()
                n += 1
        if mode == "reset":
            writer.write(sse + chunk(content("a")))
            await writer.drain()
            writer.transport.abort()
            return
        if mode == "badcl":
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1e3\r\n\r\n{}"
            )
            await writer.drain()
            writer.close()
            return
        if mode == "dupcl":
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\ncontent-length: 5\r\n\r\n{}"
            )
            await writer.drain()
            writer.close()
            return
        if mode == "crlfheader":
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-evil: a\rb\r\ncontent-length: 2\r\n\r\n{}"
            )
            await writer.drain()
            writer.close()
            return
        if mode == "bigheader":
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                + b"x-h: "
                + b"a" * 60000
                + b"\r\ncontent-length: 2\r\n\r\n{}"
            )
            await writer.drain()
            writer.close()
            return
        if mode == "manyheaders":
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                + b"x-h: a\r\n" * 5000
                + b"content-length: 2\r\n\r\n{}"
            )
            await writer.drain()
            writer.close()
            return
        writer.write(b"HTTP/1.1 400 Bad\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        writer.close()
    except Exception as exc:
        sys.stderr.write(f"evil: {exc!r}\n")
        writer.close()


async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", int(sys.argv[1]), limit=2**24)
    print("evil ready", flush=True)
    await server.serve_forever()


asyncio.run(main())
