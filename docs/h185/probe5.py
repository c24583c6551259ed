import json, socket, sys, time

PORT = int(sys.argv[1])
N = int(sys.argv[2])
M = "meta-llama/Llama-3.1-8B-Instruct"
BODY = json.dumps(
    {"model": M, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
).encode()
s = socket.create_connection(("127.0.0.1", PORT))
s.settimeout(8)
one = (
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    % len(BODY)
    + BODY
)
s.sendall(one * N)
t = time.monotonic()
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
        out += b"<eof>"
        break
    out += got
print(round(time.monotonic() - t, 2), out.count(b"HTTP/1.1 200"), out[-60:])
