"""Profile the gateway steady state: warm, SIGUSR1, N requests, SIGUSR2."""

import asyncio, os, signal, sys, tempfile, time
from pathlib import Path
from kinference.gateway.http1 import HttpClient
from loadtest import bench_gateway as bg


async def main(kind, conc, n):
    with tempfile.TemporaryDirectory() as tmp:
        async with bg.started(["kinference"], Path(tmp)) as up:
            gw = up[1]
            client = HttpClient(connect_timeout_s=10, read_timeout_s=60)
            body = bg.chat_body(kind == "streamed", 16)
            await bg.measure(client, gw, body, (300, conc), bg.Slice())
            os.kill(gw.pids[0], signal.SIGUSR1)
            await asyncio.sleep(0.2)
            s = bg.Slice()
            await bg.measure(client, gw, body, (n, conc), s)
            os.kill(gw.pids[0], signal.SIGUSR2)
            await asyncio.sleep(1.0)
            print(kind, conc, n, "cpu ms/req", s.cpu_ms, "p50", s.pct(0.5), file=sys.stderr)
            await client.aclose()


asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
