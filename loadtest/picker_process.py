"""The picker in its own process for benchmarks, with a probe of its event loop's lag.

    python -m loadtest.picker_process POLICY_FILE [--trace-stalls]

Runs the real server (`App` with the shipped settings, on uvloop, as `kinference serve`
does) on 127.0.0.1:0 and prints its gRPC port on stdout. A 2 ms probe task on the
picker's loop records how late it wakes; each line `lag` on stdin answers one JSON line
`{"worst_ms": ..., "over_10ms": ...}` for the time since the previous one (and starts
over). End of stdin stops the picker. So a benchmark's load generator and stand-in engines,
in the parent process, share nothing with the loop they measure. `--trace-stalls` runs the
loop in debug mode and logs (on stderr) each callback that held it over 10 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import uvloop
from prometheus_client import CollectorRegistry

from kinference.app import App
from kinference.config import load_policy
from kinference.settings import Settings

PROBE_S = 0.002  # the probe's sleep: short, so that a stall of a few ms shows
STALL_S = 0.010  # the bound on a stall


@dataclass
class LagProbe:
    worst_s: float = 0.0
    over: int = 0  # wake-ups later than STALL_S

    async def run(self) -> None:
        while True:
            asked = time.perf_counter()
            await asyncio.sleep(PROBE_S)
            late = time.perf_counter() - asked - PROBE_S
            self.worst_s = max(self.worst_s, late)
            self.over += late > STALL_S

    def take(self) -> dict[str, float]:
        """The figures since the previous take, and start over."""
        taken = {"worst_ms": round(self.worst_s * 1000, 2), "over_10ms": self.over}
        self.worst_s, self.over = 0.0, 0
        return taken


async def serve(policy_file: Path, trace: bool) -> None:
    loop = asyncio.get_running_loop()
    if trace:
        loop.set_debug(True)
        loop.slow_callback_duration = STALL_S
    settings = Settings(listen="127.0.0.1:0", metrics_listen="")
    app = App(settings, load_policy(policy_file), CollectorRegistry())
    await app.start()
    probe = LagProbe()
    task = asyncio.create_task(probe.run())
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    print(app.port, flush=True)
    try:
        while line := await stdin.readline():
            if line.strip() == b"lag":
                print(json.dumps(probe.take()), flush=True)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await app.server.stop(None)
        await app.close()


class PickerProcess:
    """The parent's side: starts this module with a policy, asks for the lag, stops it."""

    def __init__(self, process: asyncio.subprocess.Process, port: int) -> None:
        self.process = process
        self.port = port

    @classmethod
    async def start(cls, policy: Path, trace_stalls: bool = False) -> PickerProcess:
        """Starts a picker serving the policy file `policy`."""
        trace = ["--trace-stalls"] if trace_stalls else []
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "loadtest.picker_process", str(policy), *trace,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        return cls(process, int(await _answer(process)))

    async def lag(self) -> tuple[float, int]:
        """The picker loop's worst stall (s) and its stalls over 10 ms since the last call."""
        assert self.process.stdin is not None
        self.process.stdin.write(b"lag\n")
        taken = json.loads(await _answer(self.process))
        return taken["worst_ms"] / 1000, int(taken["over_10ms"])

    async def aclose(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), 30)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()


async def _answer(process: asyncio.subprocess.Process) -> bytes:
    assert process.stdout is not None
    line = await process.stdout.readline()
    if not line:
        raise RuntimeError(f"the picker process ended (exit {await process.wait()})")
    return line


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("policy", type=Path)
    cli.add_argument("--trace-stalls", action="store_true")
    args = cli.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    uvloop.run(serve(args.policy, args.trace_stalls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
