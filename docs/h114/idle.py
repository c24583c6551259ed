"""The gateway's CPU while idle, before and after a few requests (scratch)."""

import asyncio, sys, tempfile, time
from pathlib import Path
from loadtest import bench_gateway_streams as b
from loadtest.gateway_systems import cpu_seconds
from kinference.gateway.http1 import HttpClient


async def main():
    with tempfile.TemporaryDirectory() as tmp:
        async with b.started(["kinference"], Path(tmp), 128, 0.1) as up:
            gw = up[1]
            await asyncio.sleep(3)
            for label in ("idle after start", "idle again"):
                c0 = cpu_seconds(gw.pids[0])
                t0 = time.monotonic()
                await asyncio.sleep(8)
                print(
                    label,
                    f"{(cpu_seconds(gw.pids[0]) - c0) / (time.monotonic() - t0) * 1000:.1f} ms/s",
                )
                client = HttpClient(connect_timeout_s=10, read_timeout_s=60)
                body = b.prompt_body("x" * 6000, 1, 8)
                for i in range(50):
                    s = b.Slice()
                    await b.one_stream(
                        client, gw.url + "/v1/chat/completions", b.prompt_body("x" * 6000, i, 8), s
                    )
                await client.aclose()


asyncio.run(main())
