"""Pick CPU on the routing benchmark's own bodies, through the gateway's in-process picker.

    python -m loadtest.bench_pick_replay [--requests N] [--rounds R]

`bench_flow_cpu` times one 4 KiB chat body over 2 workers again and again; the routing
benchmark (`loadtest.routing_bench`) sends chats whose every turn re-sends the history,
questions about 48 KB documents and users of shared system prompts to 8 engines, and what
a Pick costs there depends on that mix (the prefix work grows with the prompt, and the
hashing and the prefix index see families of prompts, not one). This replays that
workload's bodies, in the order a run sends them, through `LocalPicker` (push, Pick) over
an `App` with one pool of 8 endpoints, engine readings set every few Picks and each
request's reports a few Picks later, as in flight; and times each Pick in the calling
thread's CPU time. Every round starts from a fresh `App` and replays the same bodies, the
first `--warm` of them untimed. After each Pick the replay yields to the loop once, as
the gateway does while it sends the request on, and times that step too: what the Pick
left for later (its prefix record) runs there. Figures: the mean and the median Pick per
round, the mean step after it (µs); read the lowest round, as in `bench_flow_cpu`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import AsyncIterator

from prometheus_client import CollectorRegistry

from kinference.app import App
from kinference.config.loader import parse_policy
from kinference.gateway.local import LocalPicker
from kinference.gateway.port import PickAsk
from kinference.routing.features import EngineReading
from kinference.service_types import FinalReport
from kinference.settings import Settings
from kinference.v1 import picker_pb2 as pb
from loadtest.routing_bench.fleets import Engines
from loadtest.routing_bench.replay import request_body
from loadtest.routing_bench.replicas import policy_yaml
from loadtest.routing_bench.workload import MODEL, BenchSpec, conversations

ENDPOINTS = tuple(f"127.0.0.1:{9101 + index}" for index in range(8))
IN_FLIGHT = 4  # requests whose reports come later
READINGS_EVERY = 4  # Picks between two rounds of engine readings
CHUNK_BYTES = 16384


def bodies(requests: int, seed: int) -> list[bytes]:
    """The workload's bodies in the order a run sends them (a turn ~1 s plus the user's
    pause after the previous one), with the planned replies as the history."""
    timed: list[tuple[float, int, int, bytes]] = []
    for conversation in conversations(BenchSpec(), requests, 6.0, seed):
        at = conversation.arrival_s
        turns = conversation.turns
        for index, turn in enumerate(turns):
            if index:
                at += 1.0 + conversation.think_s[index - 1]
            replies = [earlier.completion for earlier in turns[:index]]
            timed.append((at, conversation.index, index, request_body(turn, replies)))
    timed.sort()
    return [body for *_, body in timed]


async def _chunks(body: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(body), CHUNK_BYTES):
        yield body[start : start + CHUNK_BYTES]


async def replay(all_bodies: list[bytes], warm: int) -> tuple[list[float], list[float]]:
    """One round over a fresh App: each timed Pick's thread CPU, and that of the loop step
    right after it (work the Pick left for later), µs. The App is closed after it (its
    parse worker, started for the documents, stops)."""
    app = App(
        Settings(),
        parse_policy(policy_yaml(Engines([f"http://{e}" for e in ENDPOINTS], [], {}), {})),
        CollectorRegistry(),
    )
    try:
        return await _round(app, all_bodies, warm)
    finally:
        await app.close()


async def _round(app: App, all_bodies: list[bytes], warm: int) -> tuple[list[float], list[float]]:
    picker = LocalPicker(
        app.service, idle_timeout_s=30.0, model_names=lambda: (MODEL,), serving=lambda: True
    )
    load = dict.fromkeys(ENDPOINTS, 0)
    open_: list[tuple[int, str]] = []
    spent: list[float] = []
    after: list[float] = []
    for number, body in enumerate(all_bodies):
        if number % READINGS_EVERY == 0:
            _readings(app, load)
        stream = await picker.push(
            _chunks(body), declared_length=len(body), client_request_id=f"r{number}",
            request_path="/v1/chat/completions",
        )  # fmt: skip
        started = time.thread_time_ns()
        response, _ = await picker.pick(stream, PickAsk("", pb.PickRequest.INTERACTIVE, None, ""))
        picked = time.thread_time_ns()
        await asyncio.sleep(0)  # the gateway awaits its upstream: the loop runs what waits
        if number >= warm:
            spent.append((picked - started) / 1000)
            after.append((time.thread_time_ns() - picked) / 1000)
        load[response.local.endpoint] += 1
        open_.append((response.response_id, response.local.endpoint))
        if len(open_) > IN_FLIGHT:
            _finish(app, load, *open_.pop(0))
    return spent, after


def _readings(app: App, load: dict[str, int]) -> None:
    router = app.router
    for endpoint, running in load.items():
        reading = EngineReading(0.0, float(running), 0.3, scraped_at=router.now())
        router.engine_reading(endpoint, True, reading)


def _finish(app: App, load: dict[str, int], response_id: int, endpoint: str) -> None:
    load[endpoint] -= 1
    service = app.service
    pull = service.open_pull(response_id)
    for _ in pull.messages():
        pass
    service.close_pull(pull, completed=True)
    service.first_token(response_id, 20, 200)
    service.final_token(FinalReport(response_id, MODEL, 1000, 100, None, (), 0))


def render(rounds: list[tuple[list[float], list[float]]], count: int) -> str:
    means = [statistics.fmean(spent) for spent, _ in rounds]
    medians = [statistics.median(spent) for spent, _ in rounds]
    later = [statistics.fmean(after) for _, after in rounds]
    return (
        f"Pick, thread CPU µs over {len(rounds)} rounds of {len(rounds[0][0])} timed Picks "
        f"({count} bodies): mean per round lowest {min(means):.1f} "
        f"({', '.join(f'{m:.0f}' for m in means)}); median per round lowest "
        f"{min(medians):.1f}; the loop step after it, mean per round lowest {min(later):.1f}"
    )


async def _run(args: argparse.Namespace) -> str:
    all_bodies = bodies(args.requests, args.seed)
    rounds = [await replay(all_bodies, args.warm) for _ in range(args.rounds)]
    return render(rounds, len(all_bodies))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=600, help="of the workload")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--warm", type=int, default=100, help="untimed Picks per round")
    parser.add_argument("--seed", type=int, default=1)
    print(asyncio.run(_run(parser.parse_args(argv))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
