"""RSS of a replica after bursts to its byte budget, and where the memory it keeps sits.

    python -m loadtest.faults.burst_rss [--budget-mib 512] [--body-mib 8] [--rounds 2]
        [--quiet-s 35]

One `kinference serve` subprocess with `KINFERENCE_MAX_BUFFERED_BYTES` = `--budget-mib`.
Each round pushes (1 MiB chunks, 8 at a time) chat bodies of `--body-mib` until 95 % of
the budget is held, then picks and aborts every one, waits a second and reads the RSS. Prints
per round the server's baseline, peak and after RSS, the after RSS split into the brk heap
and anonymous mappings (`/proc/PID/smaps`), and the parse worker's RSS; with `--quiet-s`,
the RSS again after that many quiet seconds (past `heap.KEPT_BLOCK_IDLE_S`, the kept large
blocks are unmapped).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
from pathlib import Path

import uvloop

from loadtest.faults.harness import Fleet, Replica, kinference_env
from loadtest.flows import MODEL

MiB = 1 << 20
_SETTLE_S = 1.0  # after the releases, before reading the RSS
_CONCURRENT = 8  # pushes at a time


def rss_by_mapping(pid: int) -> dict[str, int]:
    """Resident MiB of the brk heap and of anonymous mappings."""
    totals = {"[heap]": 0, "anon": 0}
    name = ""
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if not fields[0].endswith(":"):
            name = fields[5] if len(fields) > 5 else "anon"
        elif fields[0] == "Rss:" and name in totals:
            totals[name] += int(fields[1])
    return {key: value // 1024 for key, value in totals.items()}


async def burst(replica: Replica, data: bytes, count: int) -> float:
    """Push `count` bodies, then pick and abort them; returns the peak RSS seen."""
    chunks = [data[i : i + MiB] for i in range(0, len(data), MiB)]
    client = replica.client
    ids: list[int] = []
    for start in range(0, count, _CONCURRENT):
        pushes = (
            client.push(chunks, declared_length=len(data))
            for _ in range(min(_CONCURRENT, count - start))
        )
        ids += [pushed.stream_id for pushed in await asyncio.gather(*pushes)]
    peak = replica.rss_mib()
    for stream_id in ids:
        pick = await client.pick(stream_id)
        await client.abort(pick.response_id)
    return peak


async def main(args: argparse.Namespace) -> None:
    content = "x" * (args.body_mib * MiB - 200)
    data = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": content}]})
    count = int(args.budget_mib * 0.95) // args.body_mib
    with tempfile.TemporaryDirectory() as workdir:
        fleet = Fleet(Path(workdir))
        env = kinference_env(
            max_buffered_bytes=args.budget_mib * MiB, max_body_bytes=64 * MiB, body_ttl_s=60
        )
        replica = await fleet.start("a", **env)
        try:
            baseline = replica.rss_mib()
            for round_ in range(args.rounds):
                peak = await burst(replica, data.encode(), count)
                await asyncio.sleep(_SETTLE_S)
                split = rss_by_mapping(replica.pid)
                print(
                    f"round {round_ + 1}: {count} x {args.body_mib} MiB held; server RSS "
                    f"baseline {baseline:.0f}, peak {peak:.0f}, after {replica.rss_mib():.0f} "
                    f"MiB (heap {split['[heap]']}, anon {split['anon']}); parse worker "
                    f"{replica.children_rss_mib():.0f} MiB",
                    flush=True,
                )
            if args.quiet_s > 0:
                await asyncio.sleep(args.quiet_s)
                split = rss_by_mapping(replica.pid)
                print(
                    f"after {args.quiet_s:g} s quiet: server RSS {replica.rss_mib():.0f} MiB "
                    f"(heap {split['[heap]']}, anon {split['anon']})",
                    flush=True,
                )
        finally:
            await fleet.close()
    print(f"load average {os.getloadavg()[0]:.2f}")


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-mib", type=int, default=512)
    parser.add_argument("--body-mib", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--quiet-s", type=float, default=0.0, help="read the RSS again after this long idle"
    )
    uvloop.run(main(parser.parse_args()))


if __name__ == "__main__":
    cli()
