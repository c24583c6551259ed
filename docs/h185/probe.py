import json, socket, sys, time

PORT = int(sys.argv[1])
M = "meta-llama/Llama-3.1-8B-Instruct"


def raw(data, read_timeout=10, chunks=None, delay=0.0):
    s = socket.create_connection(("127.0.0.1", PORT))
    s.settimeout(read_timeout)
    try:
        if chunks is None:
            s.sendall(data)
        else:
            for c in chunks:
                s.sendall(c)
                if delay:
                    time.sleep(delay)
        out = b""
        while True:
            try:
                got = s.recv(65536)
            except socket.timeout:
                out += b"<timeout>"
                break
            except ConnectionResetError:
                out += b"<reset>"
                break
            if not got:
                break
            out += got
        return out
    finally:
        s.close()


def post(body, extra=b"", path=b"/v1/chat/completions", version=b"HTTP/1.1"):
    if isinstance(body, str):
        body = body.encode()
    head = (
        b"POST "
        + path
        + b" "
        + version
        + b"\r\nhost: x\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: %d\r\n"
        % len(body)
        + extra
        + b"\r\n"
    )
    return raw(head + body)


def show(name, out, n=300):
    first = out.split(b"\r\n", 1)[0]
    body = out.split(b"\r\n\r\n", 1)[-1][:n]
    print(f"{name:28} {first.decode('latin-1')!s:40} {body!r}")


def chat(**kw):
    d = {"model": M, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    d.update(kw)
    return json.dumps(d)


tests = {
    "deep [": lambda: post('{"model": "%s", "messages": %s}' % (M, "[" * 100000)),
    "deep [ closed": lambda: post(
        '{"model": "%s", "messages": %s%s}' % (M, "[" * 100000, "]" * 100000)
    ),
    "deep { in content": lambda: post(
        '{"model": "%s", "messages": [{"role": "user", "content": %s}]}'
        % (M, '{"a":' * 50000 + "1" + "}" * 50000)
    ),
    "invalid utf8": lambda: post(
        b'{"model": "' + M.encode() + b'", "messages": [{"role": "user", "content": "\xff\xfe"}]}'
    ),
    "lone surrogate": lambda: post(
        '{"model": "%s", "messages": [{"role": "user", "content": "\\ud800"}]}' % M
    ),
    "dup keys": lambda: post(
        '{"model": "nope", "model": "%s", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}'
        % M
    ),
    "huge number": lambda: post(
        '{"model": "%s", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1%s}'
        % (M, "0" * 5000)
    ),
    "huge float": lambda: post(
        '{"model": "%s", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1e999}' % M
    ),
    "neg max_tokens": lambda: post(chat(max_tokens=-5)),
    "stream str": lambda: post(chat(stream="yes")),
    "stream null": lambda: post(chat(stream=None)),
    "stream 1": lambda: post(chat(stream=1)),
    "model absent": lambda: post(json.dumps({"messages": [{"role": "user", "content": "hi"}]})),
    "model empty": lambda: post(chat(model="")),
    "model int": lambda: post(chat(model=5)),
    "model 10MB": lambda: post(chat(model="m" * 10_000_000)),
    "model newline": lambda: post(chat(model="a\nFAKE LOG LINE ERROR")),
    "model unicode": lambda: post(chat(model="\u202e\u0000\U0001f600")),
    "body not json": lambda: post("hello"),
    "body array": lambda: post("[1,2]"),
    "body empty": lambda: post(""),
    "messages not list": lambda: post(chat(messages="hi")),
    "HTTP/1.0": lambda: post(chat(), version=b"HTTP/1.0"),
    "query string": lambda: post(chat(), path=b"/v1/chat/completions?x=%0d%0aevil"),
    "path traversal": lambda: post(chat(), path=b"/v1/chat/completions/../../metrics"),
    "double slash": lambda: post(chat(), path=b"//v1/chat/completions"),
    "trailing slash": lambda: post(chat(), path=b"/v1/chat/completions/"),
    "absolute uri": lambda: post(chat(), path=b"http://evil.example/v1/chat/completions"),
    "xrid newline-ish": lambda: post(chat(), extra=b"x-request-id: a\tb\x7f\r\n"),
    "xrid long": lambda: post(chat(), extra=b"x-request-id: " + b"a" * 5000 + b"\r\n"),
    "tenant long": lambda: post(chat(), extra=b"x-kinference-tenant: " + b"t" * 50000 + b"\r\n"),
    "qos bad": lambda: post(chat(), extra=b"x-kinference-qos: " + b"\xff" * 100 + b"\r\n"),
    "cl + te": lambda: raw(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n"
    ),
    "cl bad": lambda: raw(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: \xb2\r\n\r\nab"
    ),
    "cl two": lambda: raw(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nabc"
    ),
    "cl plus": lambda: raw(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: +2\r\n\r\n{}"
    ),
}
only = sys.argv[2:]
for name, fn in tests.items():
    if only and name not in only:
        continue
    t = time.monotonic()
    try:
        out = fn()
    except Exception as exc:
        out = repr(exc).encode()
    show(name, out)
    if time.monotonic() - t > 2:
        print(f"   took {time.monotonic() - t:.1f}s")
