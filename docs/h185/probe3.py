import socket, sys, time

PORT = int(sys.argv[1])
WAIT = float(sys.argv[2])
s = socket.create_connection(("127.0.0.1", PORT))
s.settimeout(5)
s.sendall(
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-kinference-qos: nope\r\ncontent-length: 1000000\r\n\r\n{"
)
print(s.recv(4096).split(b"\r\n")[0])
time.sleep(1)
s.sendall(b"x")
t = time.monotonic()
s.settimeout(WAIT)
try:
    got = s.recv(10)
    print("closed after", round(time.monotonic() - t, 1), got)
except socket.timeout:
    print("still open after", WAIT, "s")
