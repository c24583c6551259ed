"""RSS of a replica while many giant bodies are parsed at once, against its byte budget.

    python -m loadtest.faults.parse_memory [--callers 16] [--budget-mib 64] [--members 3]

One `kinference serve` subprocess with `KINFERENCE_MAX_BUFFERED_BYTES` = `--budget-mib`.
`--callers` concurrent callers each push (1 MiB chunks) and pick, `--rounds` times, a
body built to cost the most at parse: a read `tools` field of 1 MiB of `[{},...]` (kept as
~50 MiB of objects through the parse) and `--members` unread 1 MiB members of it. The
parse's estimated cost is reserved from the same budget, so a push or a Pick that finds it
full answers RESOURCE_EXHAUSTED. VmRSS of the server and of its parse worker (a child
process) is sampled every 20 ms; prints the outcomes, the baseline and peak RSS of the two
together (and the server's alone), and the peak's growth over the baseline as a multiple of
the budget (target <= 1.5).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
from collections import Counter
from pathlib import Path

import grpc
import uvloop

from loadtest.faults.harness import Fleet, Replica, kinference_env
from loadtest.flows import MODEL

MiB = 1 << 20


def costly_body(members: int) -> bytes:
    head = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    parts = [json.dumps(head)[:-1].encode()]
    parts.append(b',"tools":[' + b",".join([b"{}"] * (MiB // 3 - 8)) + b"]")
    for index in range(members):
        parts.append(b',"x%d":[' % index + b",".join([b"{}"] * (MiB // 3 - 8)) + b"]")
    return b"".join(parts) + b"}"


async def caller(replica: Replica, data: bytes, rounds: int, outcomes: Counter[str]) -> None:
    chunks = [data[i : i + MiB] for i in range(0, len(data), MiB)]
    for _ in range(rounds):
        try:
            pushed = await replica.client.push(chunks, declared_length=len(data))
            pick = await replica.client.pick(pushed.stream_id)
            outcomes[f"Pick {pick.outcome}"] += 1
            await replica.client.abort(pick.response_id)
        except grpc.aio.AioRpcError as exc:
            outcomes[exc.code().name] += 1


def rss_mib(replica: Replica) -> float:
    """The server's and its parse worker's."""
    return replica.rss_mib() + replica.children_rss_mib()


async def sample(replica: Replica, stop: asyncio.Event, peak: list[float]) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], rss_mib(replica))
        peak[1] = max(peak[1], replica.rss_mib())
        await asyncio.sleep(0.02)


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as workdir:
        fleet = Fleet(Path(workdir))
        env = kinference_env(
            max_buffered_bytes=args.budget_mib * MiB, max_body_bytes=64 * MiB, body_ttl_s=30
        )
        replica = await fleet.start("a", **env)
        try:
            data = costly_body(args.members)
            warm: Counter[str] = Counter()
            await caller(replica, data, 1, warm)  # the parse worker and its imports
            baseline, server_baseline = rss_mib(replica), replica.rss_mib()
            peak, stop, outcomes = [baseline, server_baseline], asyncio.Event(), Counter[str]()
            sampler = asyncio.create_task(sample(replica, stop, peak))
            await asyncio.gather(
                *(caller(replica, data, args.rounds, outcomes) for _ in range(args.callers))
            )
            stop.set()
            await sampler
            after, server_after = rss_mib(replica), replica.rss_mib()
        finally:
            await fleet.close()
    growth = peak[0] - baseline
    print(
        f"{args.callers} callers x {args.rounds} x {len(data) / MiB:.0f} MiB bodies, budget "
        f"{args.budget_mib} MiB: {dict(outcomes)}"
    )
    print(
        f"RSS (server + parse worker) baseline {baseline:.0f} MiB, peak {peak[0]:.0f} MiB, "
        f"after {after:.0f} MiB; peak growth {growth:.0f} MiB = "
        f"{growth / args.budget_mib:.2f}x the budget"
    )
    print(
        f"server alone: baseline {server_baseline:.0f} MiB, peak {peak[1]:.0f} MiB, "
        f"after {server_after:.0f} MiB"
    )
    print(f"load average {os.getloadavg()[0]:.2f}")


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--callers", type=int, default=16)
    parser.add_argument("--budget-mib", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--members", type=int, default=3)
    uvloop.run(main(parser.parse_args()))


if __name__ == "__main__":
    cli()
