"""A crowd of client connections past `kinference gateway`'s cap, then released.

    python -m loadtest.crowd_connections [--cap 1000] [--over 3000]

Starts `kinference gateway` (hosting the picker, no engine: only `/health` is asked) with
`KINFERENCE_GATEWAY_MAX_CLIENT_CONNECTIONS=cap`, holds `cap` idle connections, opens `over`
more at once (each sends `GET /health` and reads to the end), then lets the idle ones go and
checks that 50 requests at once (at most `cap`) are served. Prints the answers the crowd
got (503, or 0: closed without one), how long they took, the gateway's RSS with the idle
connections held and its log lines about refusals (docs/gateway.md, "Client connections").
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import sys
import tempfile
import time

from loadtest.servers import free_port

HEALTH = b"GET /health HTTP/1.1\r\nhost: gateway\r\nconnection: close\r\n\r\n"
WAIT_S = 30.0  # the longest a connection waits for its answer
READY_S = 60.0  # the longest the gateway may take to start


async def ask(port: int) -> int:
    """The status of `/health` on a fresh connection; 0 when closed without an answer."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return 0
    try:
        writer.write(HEALTH)
        data = await asyncio.wait_for(reader.read(), WAIT_S)
    except (OSError, TimeoutError):
        data = b""
    finally:
        writer.close()
    return int(data.split(b" ")[1]) if data.startswith(b"HTTP/") else 0


async def _all_served(port: int, at_once: int) -> bool:
    return all(
        status == 200 for status in await asyncio.gather(*(ask(port) for _ in range(at_once)))
    )


async def crowd(cap: int, over: int) -> None:
    port = free_port()
    env = dict(os.environ, KINFERENCE_GATEWAY_MAX_CLIENT_CONNECTIONS=str(cap))
    env["KINFERENCE_METRICS_LISTEN"] = f"127.0.0.1:{free_port()}"
    argv = [sys.executable, "-m", "kinference", "gateway", "--listen", f"127.0.0.1:{port}"]
    argv += ["--grpc-listen", f"127.0.0.1:{free_port()}"]
    with tempfile.TemporaryFile("w+") as log:
        process = await asyncio.create_subprocess_exec(*argv, env=env, stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + READY_S
            while await ask(port) != 200:
                if process.returncode is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise RuntimeError(f"the gateway did not start: {log.read()[-2000:]}")
                await asyncio.sleep(0.2)
            idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(cap)]
            rss_kib = _rss_kib(process.pid)
            began = time.perf_counter()
            answers = await asyncio.gather(*(ask(port) for _ in range(over)))
            took = time.perf_counter() - began
            print(f"{cap} idle connections held (gateway RSS {rss_kib / 1024:.0f} MiB);")
            print(f"{over} more at once: {dict(collections.Counter(answers))} in {took:.2f} s")
            for _reader, writer in idle:
                writer.close()
            began = time.perf_counter()
            at_once = min(50, cap)
            while not await _all_served(port, at_once):  # noqa: ASYNC110 (polling)
                await asyncio.sleep(0.05)
            took = time.perf_counter() - began
            print(f"released: {at_once} at once all 200 within {took:.2f} s")
        finally:
            process.terminate()
            await process.wait()
        log.seek(0)
        lines = [line.rstrip() for line in log if "at the cap" in line]
    print(f"log lines about refusals: {len(lines)}")
    for line in lines:
        print(f"  {line}")


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        return int(status.read().split("VmRSS:")[1].split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cap", type=int, default=1000, help="the gateway's connection cap")
    parser.add_argument("--over", type=int, default=3000, help="connections past it at once")
    args = parser.parse_args()
    asyncio.run(crowd(args.cap, args.over))


if __name__ == "__main__":
    main()
