import json, socket, sys, time, threading

PORT = int(sys.argv[1])
M = "meta-llama/Llama-3.1-8B-Instruct"
BODY = json.dumps(
    {"model": M, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
).encode()


def conn():
    s = socket.create_connection(("127.0.0.1", PORT))
    s.settimeout(15)
    return s


def readall(s):
    out = b""
    while True:
        try:
            got = s.recv(65536)
        except socket.timeout:
            return out + b"<timeout>"
        except ConnectionResetError:
            return out + b"<reset>"
        if not got:
            return out
        out += got


def first(out):
    return out.split(b"\r\n", 1)[0].decode("latin-1")


def over_cap_declared():
    s = conn()
    s.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
        % (200 * 2**20)
    )
    sent = 0
    try:
        while sent < 20 * 2**20:
            s.sendall(b"x" * 65536)
            sent += 65536
    except OSError as exc:
        print("   write failed after", sent, repr(exc))
    out = readall(s)
    print("over cap declared:", first(out), out[-200:])


def over_cap_chunked():
    s = conn()
    s.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    sent = 0
    try:
        while sent < 80 * 2**20:
            s.sendall(b"100000\r\n" + b"x" * 0x100000 + b"\r\n")
            sent += 0x100000
    except OSError as exc:
        print("   write failed after", sent, repr(exc))
    out = readall(s)
    print("over cap chunked:", first(out), out[-200:])


def tiny_chunks():
    s = conn()
    s.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
    )
    t = time.monotonic()
    data = b"".join(b"1\r\n" + bytes([c]) + b"\r\n" for c in BODY)
    pad = BODY[:-1] + b', "user": "' + b"u" * 20000 + b'"}'
    data = b"".join(b"1\r\n" + bytes([c]) + b"\r\n" for c in pad) + b"0\r\n\r\n"
    s.sendall(data)
    out = readall(s)
    print("20k 1-byte chunks:", first(out), f"{time.monotonic() - t:.2f}s", out[-120:])


def expect_continue():
    s = conn()
    s.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nexpect: 100-continue\r\nconnection: close\r\ncontent-length: %d\r\n\r\n"
        % len(BODY)
    )
    got = s.recv(1000)
    print("expect: got first", got[:40])
    s.sendall(BODY)
    out = got + readall(s)
    print(
        "expect:", out.count(b"HTTP/1.1"), [l for l in out.split(b"\r\n") if l.startswith(b"HTTP/")]
    )


def pipelined():
    s = conn()
    one = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
        % len(BODY)
        + BODY
    )
    last = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
        % len(BODY)
        + BODY
    )
    s.sendall(one * 5 + b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n" + last)
    out = readall(s)
    print("pipelined 7:", [l.decode() for l in out.split(b"\r\n") if l.startswith(b"HTTP/")])


def http10_keepalive():
    s = conn()
    s.sendall(
        b"POST /v1/chat/completions HTTP/1.0\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
        % len(BODY)
        + BODY
    )
    out = readall(s)
    print("http/1.0:", first(out), b"transfer-encoding" in out.lower(), out[-60:])


def http10_stream():
    body = json.dumps(
        {
            "model": M,
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 4,
        }
    ).encode()
    s = conn()
    s.sendall(
        b"POST /v1/chat/completions HTTP/1.0\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
        % len(body)
        + body
    )
    out = readall(s)
    print("http/1.0 stream:", first(out), b"transfer-encoding: chunked" in out.lower(), out[-80:])


def body_never_finishes():
    s = conn()
    s.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n"
        + BODY[:20]
    )
    t = time.monotonic()
    out = readall(s) if False else None
    s.settimeout(45)
    out = readall(s)
    print("body never finishes:", first(out), f"{time.monotonic() - t:.1f}s", out[-150:])


for name in sys.argv[2:]:
    globals()[name]()
