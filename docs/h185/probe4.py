import socket, sys, time, json

PORT = int(sys.argv[1])
WAIT = float(sys.argv[2])
junk = eval(sys.argv[3])
s = socket.create_connection(("127.0.0.1", PORT))
s.settimeout(5)
s.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
print(s.recv(4096).split(b"\r\n")[0])
s.sendall(junk)
t = time.monotonic()
s.settimeout(WAIT)
try:
    got = s.recv(100)
    print("closed after", round(time.monotonic() - t, 1), got)
except socket.timeout:
    print("still open after", WAIT, "s")
