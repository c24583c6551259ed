"""Event-loop lag while hostile bodies are parsed, against a baseline of the same run.

    python -m loadtest.faults.parse_lag [--bodies 3] [--members 8] [--seconds 4]

One in-process picker (the probe must share its loop), four polite callers looping over
push, Pick, Abort of a 4 KiB chat body. Phase "baseline": only them. Phase "hostile": them
and `--bodies` concurrent callers each pushing, in 1 MiB chunks, a chat body with
`--members` extra top-level members of ~1 MiB of dense JSON (one of `[{},{},...]`, the
rest `[1,1,...]`: the costliest to scan and to decode), then picking it. Then a second
baseline. A probe sleeping 1 ms records how late the loop wakes it (perf_counter). Prints
p50 / p99 / max of the lag per phase, the loop thread's worst CPU between two wake-ups, the
hostile parse time, and the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

import uvloop
from prometheus_client import CollectorRegistry

from kinference.app import App
from kinference.client import PickerClient
from kinference.config import parse_policy
from kinference.heap import fix_mmap_threshold, freeze_startup_heap
from kinference.settings import Settings

MiB = 1 << 20
MODEL = "bench-model"
POLICY = f"""
pools:
  - namespace: default
    name: chat
    endpoints: ["10.0.0.5:8000", "10.0.0.6:8000"]
    models: ["{MODEL}"]
"""
PROBE_S = 0.001


def dense_body(members: int) -> bytes:
    """A valid chat request with `members` extra members of ~1 MiB dense JSON each."""
    head = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    parts = [json.dumps(head)[:-1].encode()]
    for index in range(members):
        item = b"{}" if index == 0 else b"1"
        parts.append(b',"x%d":[' % index + b",".join([item] * (MiB // (len(item) + 1))) + b"]")
    return b"".join(parts) + b"}"


def polite_body() -> bytes:
    content = "lorem ipsum dolor sit amet " * 150  # ~4 KiB
    return json.dumps({"model": MODEL, "messages": [{"role": "user", "content": content}]}).encode()


class Probe:
    """How late a 1 ms sleeper wakes, and the worst CPU the loop's thread spent between two
    wake-ups (work on the loop; the wall-clock lag adds the OS giving the core to others)."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self.worst_cpu_s = 0.0
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            before, cpu = time.perf_counter(), time.thread_time()
            await asyncio.sleep(PROBE_S)
            self.lags.append(time.perf_counter() - before - PROBE_S)
            self.worst_cpu_s = max(self.worst_cpu_s, time.thread_time() - cpu)

    async def stop(self) -> list[float]:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        return sorted(self.lags)


def summary(name: str, lags: list[float], extra: str = "") -> str:
    def at(q: float) -> float:
        return lags[min(int(q * len(lags)), len(lags) - 1)] * 1000

    return (
        f"{name:10s} samples {len(lags):6d}  lag p50 {at(0.5):6.2f}  p99 {at(0.99):6.2f}  "
        f"p99.9 {at(0.999):6.2f}  max {lags[-1] * 1000:7.2f} ms{extra}"
    )


async def polite(client: PickerClient, stop: asyncio.Event) -> None:
    body = polite_body()
    while not stop.is_set():
        pushed = await client.push([body])
        pick = await client.pick(pushed.stream_id)
        await client.abort(pick.response_id)


async def hostile(client: PickerClient, data: bytes) -> float:
    chunks = [data[i : i + MiB] for i in range(0, len(data), MiB)]
    started = time.perf_counter()
    pushed = await client.push(chunks, declared_length=len(data))
    pick = await client.pick(pushed.stream_id)
    await client.abort(pick.response_id)
    return time.perf_counter() - started


async def main(args: argparse.Namespace) -> None:
    settings = Settings(
        listen="127.0.0.1:0",
        metrics_listen="",
        # The bodies, and a parse's charge: its copy in the parse worker and ~34 MiB of
        # estimated objects for the member of `[{},{},...]`.
        max_buffered_bytes=(args.bodies + 2) * (args.members + 2) * MiB + 40 * MiB,
        max_body_bytes=(args.members + 2) * MiB,
    )
    app = App(settings, parse_policy(POLICY), CollectorRegistry())
    fix_mmap_threshold()  # as `kinference serve` does
    await app.start()
    freeze_startup_heap()
    client = PickerClient(f"127.0.0.1:{app.port}")
    stop = asyncio.Event()
    callers = [asyncio.create_task(polite(client, stop)) for _ in range(4)]
    data = dense_body(args.members)
    try:
        for phase in ("baseline", "hostile", "baseline"):
            probe = Probe()
            extra = ""
            if phase == "hostile":
                times = await asyncio.gather(*(hostile(client, data) for _ in range(args.bodies)))
                extra = f"  ({args.bodies} x {len(data) / MiB:.0f} MiB: {max(times):.1f} s)"
            else:
                await asyncio.sleep(args.seconds)
            extra += f"  loop CPU max {probe.worst_cpu_s * 1000:.1f} ms"
            print(summary(phase, await probe.stop(), extra), flush=True)
    finally:
        stop.set()
        await asyncio.gather(*callers, return_exceptions=True)
        await client.close()
        await app.server.stop(None)
        await app.close()
    print(f"load average {os.getloadavg()[0]:.2f}")


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bodies", type=int, default=3)
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=4.0)
    uvloop.run(main(parser.parse_args()))


if __name__ == "__main__":
    cli()
