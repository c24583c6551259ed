"""h169: the longest single C calls of the precise path's tokenizer work on 1 MiB prompts.

    python docs/h169/ccalls.py [--size 1048576] [--rounds 1] [--over-ms 0.5]

The bench's prompts (`loadtest.bench_precise_pick`: cold prompts, and chat x16 — 32
conversations x 2 turns on one shared system prompt — in bursts of 16) go through the real
`PromptPreparer.prepare` on a loop, its tokenizer thread profiled with `sys.setprofile`:
every *leaf* C call (one that runs no Python inside it) is timed in the thread's CPU time
(`time.thread_time`: a busy machine's preemptions left out; wall time beside it), and
those over `--over-ms` are listed by C function and calling line (count, median, max).
The background rest is drained after each burst. Bodies are parsed before profiling (the
picker parses bodies over 32 KiB in its worker process). Whether a call holds the GIL is
not measured here: hashlib lets go of it at >= 2 KiB, `encode_batch_fast` always; every
other call listed holds it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

from kinference.bodies import Body
from kinference.client import split_chunks
from kinference.requests.parse import parse_request
from kinference.tokenize.prepare import PromptPreparer
from kinference.tokenize.tokenizer import PromptTokenizer
from loadtest.bench_precise_pick import BLOCK, MODEL, chat_prompts, cold_prompts
from loadtest.tiny_model import write_model
from tests.tokenize.files import precise_chat_policy


class HeldEverywhere:
    """Every block held somewhere: each Pick walks to its bound (the bench's warm case)."""

    def reach(self, refs: object) -> object:
        return len

    def completed(self, *_: object) -> None:
        pass


class Calls:
    """Leaf C calls timed per (function, caller)."""

    def __init__(self, over_s: float) -> None:
        self.over_s = over_s
        self.stack: list[list[Any]] = []  # [cpu, name, where, leaf, wall]
        self.seen: collections.defaultdict[str, list[float]] = collections.defaultdict(list)
        self.wall: collections.defaultdict[str, list[float]] = collections.defaultdict(list)

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "c_call":
            name = getattr(arg, "__qualname__", None) or repr(arg)
            where = f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}"
            self.stack.append([time.thread_time(), name, where, True, time.perf_counter()])
        elif event in ("c_return", "c_exception") and self.stack:
            started, name, where, leaf, wall = self.stack.pop()
            took = time.thread_time() - started
            if leaf and took >= self.over_s:
                self.seen[f"{name} ({where})"].append(took * 1000)
                self.wall[f"{name} ({where})"].append((time.perf_counter() - wall) * 1000)
        elif event == "call" and self.stack:
            self.stack[-1][3] = False  # Python ran inside: not one C call


async def run(size: int, rounds: int, calls: Calls) -> float:
    work = Path(tempfile.mkdtemp(prefix="h169-"))
    files = write_model(work)
    tokenizer = PromptTokenizer.from_files(str(files[0]), str(files[1]), BLOCK)
    waves = cold_prompts(tokenizer, size, 4)
    chats = chat_prompts(tokenizer, size, 32, 2)
    for turn in range(2):
        waves += [[c[turn] for c in chats[i : i + 16]] for i in (0, 16)]
    parsed = []
    for wave in waves:
        bodies = []
        for prompt in wave:
            raw = prompt.body.replace(f'"model": "{MODEL}"'.encode(), b'"model": "m"', 1)
            body = Body(list(split_chunks(raw)), reserved=0)  # the test policy's model
            bodies.append((parse_request(body), body))
        parsed.append(bodies)
    busy = 0.0
    for _ in range(rounds):
        preparer = PromptPreparer(
            precise_chat_policy(files, BLOCK), caches=HeldEverywhere(), clock=lambda: 0.0
        )  # type: ignore[arg-type]
        await asyncio.wrap_future(preparer.warm()[0])
        await asyncio.wrap_future(preparer._thread.submit(lambda: sys.setprofile(calls)))
        for bodies in parsed:
            started = time.thread_time()
            await asyncio.gather(*(preparer.prepare(r, b) for r, b in bodies))
            while preparer._later_chars or not preparer._thread.idle:  # noqa: ASYNC110
                await asyncio.sleep(0.005)  # the background rest, to its end
            busy += time.thread_time() - started
        preparer.close()
    return busy


def main() -> None:
    cli = argparse.ArgumentParser()
    cli.add_argument("--size", type=int, default=1 << 20)
    cli.add_argument("--rounds", type=int, default=1)
    cli.add_argument("--over-ms", type=float, default=0.5)
    args = cli.parse_args()
    calls = Calls(args.over_ms / 1000)
    asyncio.run(run(args.size, args.rounds, calls))
    print("| C call (caller) | n | CPU median ms | CPU max ms | wall max ms |")
    print("|---|--:|--:|--:|--:|")
    for key, took in sorted(calls.seen.items(), key=lambda kv: -max(kv[1])):
        wall, median = max(calls.wall[key]), statistics.median(took)
        print(f"| `{key}` | {len(took)} | {median:.2f} | {max(took):.2f} | {wall:.2f} |")


if __name__ == "__main__":
    main()
