"""The CPU a precise Pick's parts cost, in process: thread CPU time per part, not latency.

    python -m loadtest.bench_precise_cpu [--size 65536] [--rounds 5]
        [--workloads cold,chat,chatx16,dynamo] [--profile tottime] [--json FILE]

The Pick bench's prompts (`bench_precise_pick`: cold prompts, conversations on one shared
system prompt) and its stand-in engines' payloads, replayed one Pick at a time through the
precise parts alone: one `PromptTokenizer`, one `PoolCaches` of 4 workers, no server
(`chatx16`: the Pick bench's x16 conversations, their turns interleaved wave by wave and
conversation i of a wave on worker i mod 4 as the server spreads them, so that 16
conversations share the system prompt's blocks on the workers). Per
Pick: the tokenization as the Pick runs it (`start`, `advance` to its stop), the match,
`sent` and `finished` (the ageing touches of Pick and Abort), the rest tokenized in 2 KiB
slices as the background does, and the engine's events decoded and applied. Each part is
timed with `time.thread_time` (the Rust encoder's own threads are not counted); reported
per Pick, the lowest of `--rounds` rounds (each on fresh state): CPU time, which a busy
machine's noise hides far less than latency. `--profile` prints cProfile's view of the
last round.

`dynamo`: the routing bench's Dynamo workload instead (`loadtest.precise_dynamo`: its bodies
in send order, `--seeds`, `--requests` each, at `--rate`, on the mocker's model in
`--model-dir`), each through the server's `PromptPreparer.prepare` (the loop's CPU in it, and
the tokenizer thread's if it took part: "tokenization at Pick") and its background rest (the
tokenizer thread's CPU: "the rest in the background"); per body kind too.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import pstats
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kinference.kvcache.pool import PoolCaches, Request
from kinference.kvevents.wire import decode_batch
from kinference.tokenize.bounds import FOREGROUND_CHARS, LATER_SLICE_CHARS
from kinference.tokenize.tokenizer import PromptText, PromptTokenizer
from loadtest import bench_precise_pick as pick
from loadtest import precise_dynamo
from loadtest.kv_publisher import HeldBlocks
from loadtest.tiny_model import write_model

SLOTS = 4
INTERLEAVED = "chatx16"  # the Pick bench's chat x16, turns interleaved (see the docstring)
DYNAMO = "dynamo"  # the routing bench's Dynamo workload (see the docstring)
_DYNAMO_PARTS = {"at Pick": "tokenization at Pick", "rest": "the rest in the background"}
WAVE = 16
Workload = tuple[str, list[list[pick.Prompt]]]


class Parts:
    """Thread CPU time per part, summed."""

    def __init__(self) -> None:
        self.seconds: defaultdict[str, float] = defaultdict(float)

    def __call__(self, part: str, work: Callable[..., Any], *args: Any) -> Any:
        started = time.thread_time()
        try:
            return work(*args)
        finally:
            self.seconds[part] += time.thread_time() - started


class Replay:
    """The precise state one round replays its Picks on."""

    def __init__(self, files: tuple[Path, Path], parts: Parts) -> None:
        self.tokenizer = PromptTokenizer.from_files(str(files[0]), str(files[1]), pick.BLOCK)
        self.tokenizer.warm()
        self.caches = PoolCaches("p", pick.BLOCK)
        self.engines = [HeldBlocks() for _ in range(SLOTS)]
        self.parts = parts
        self.picks = 0

    def run(self, workloads: list[Workload]) -> None:
        for name, conversations in workloads:
            if name == INTERLEAVED:
                for start in range(0, len(conversations), WAVE):
                    wave = conversations[start : start + WAVE]
                    for turn in range(max(map(len, wave))):
                        for i, turns in enumerate(wave):
                            if turn < len(turns):
                                self.pick(name, turns[turn], i % SLOTS)
                continue
            for turns in conversations:
                for prompt in turns:
                    self.pick(name, prompt)

    def pick(self, name: str, prompt: pick.Prompt, worker: int | None = None) -> None:
        parts, caches, key = self.parts, self.caches, self.picks
        self.picks += 1
        text = PromptText(messages=json.loads(prompt.body)["messages"])
        work = parts(f"{name}: tokenization at Pick", self.tokenizer.start, text)
        reach = parts(f"{name}: tokenization at Pick", caches.reach)
        parts(f"{name}: tokenization at Pick", work.advance, reach, FOREGROUND_CHARS)
        blocks = work.result(key + 1)
        longest = parts(f"{name}: match", caches.index.longest, blocks.blocks, range(SLOTS))
        # The longest match; among equals, this Pick's turn (cold prompts spread).
        slot = max(range(SLOTS), key=lambda s: (longest.get(s, 0), s == key % SLOTS))
        slot = slot if worker is None else worker
        request = Request(key, 8, time.monotonic())
        routed = f"{name}: routed and released"
        parts(routed, caches.sent, slot, blocks, longest.get(slot, 0), request)
        parts(routed, caches.finished, slot, key)
        while not work.done:
            parts(f"{name}: the rest in the background", work.advance, None, LATER_SLICE_CHARS)
        if not blocks.exact:
            rest = tuple(work.blocks[: max(work.tokens - 1, 0) // work.block_size])
            parts(f"{name}: the rest in the background", caches.complete, key + 1, rest, 0.0)
        for payload in self.engines[slot].run(prompt.blocks):
            batch = parts(f"{name}: events decoded", decode_batch, payload)
            parts(f"{name}: events applied", caches.apply, slot, batch.events)


def workloads(tokenizer: PromptTokenizer, size: int, names: list[str]) -> list[Workload]:
    """As `bench_precise_pick` sizes them (its one-in-flight conversations)."""
    count = max(4 if size > 64 * pick.KIB else 32, 256 * pick.KIB // max(size, 4 * pick.KIB))
    turns = 6 if size <= 256 * pick.KIB else 2
    made = {
        "cold": lambda: pick.cold_prompts(tokenizer, size, count),
        "chat": lambda: pick.chat_prompts(tokenizer, size, max(count // 4, 2), turns),
        INTERLEAVED: lambda: pick.chat_prompts(tokenizer, size, 2 * WAVE, turns),
    }
    return [(name, made[name]()) for name in names]


def dynamo_round(args: argparse.Namespace, parts: Parts) -> dict[str, int]:
    """One round of the Dynamo workload into `parts`; Picks by name (all, and per kind)."""
    picks: defaultdict[str, int] = defaultdict(int)
    clocks = precise_dynamo.Clocks()
    for seed in map(int, args.seeds.split(",")):
        bodies = precise_dynamo.bodies(seed, args.rate, args.requests)
        asyncio.run(precise_dynamo.replay(bodies, args.model_dir, clocks))
        for kind, _ in bodies:
            picks[DYNAMO] += 1
            picks[f"{DYNAMO} {kind}"] += 1
    for (kind, part), seconds in clocks.seconds.items():
        for name in (DYNAMO, f"{DYNAMO} {kind}"):
            parts.seconds[f"{name}: {_DYNAMO_PARTS[part]}"] += seconds
    return picks


def measure(args: argparse.Namespace, files: tuple[Path, Path]) -> dict[str, float]:
    """Per part, µs per Pick: the lowest of the rounds."""
    names = args.workloads.split(",")
    loads, others = [], [name for name in names if name != DYNAMO]
    if others:
        tokenizer = PromptTokenizer.from_files(str(files[0]), str(files[1]), pick.BLOCK)
        loads = workloads(tokenizer, args.size, others)
    picks = {name: sum(map(len, conversations)) for name, conversations in loads}
    gc.collect()
    gc.freeze()  # the prepared prompts are the bench's, not the parts'
    best: dict[str, float] = {}
    for round_ in range(args.rounds):
        parts = Parts()
        profile = cProfile.Profile() if args.profile and round_ == args.rounds - 1 else None
        if profile is not None:
            profile.enable()
        if loads:
            Replay(files, parts).run(loads)
        if DYNAMO in names:
            picks.update(dynamo_round(args, parts))
        if profile is not None:
            profile.disable()
            pstats.Stats(profile, stream=sys.stderr).sort_stats(args.profile).print_stats(40)
        for part, seconds in parts.seconds.items():
            per_pick = seconds * 1e6 / picks[part.split(":")[0]]
            best[part] = min(best.get(part, per_pick), per_pick)
    gc.unfreeze()
    return best


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--size", type=int, default=64 * pick.KIB)
    cli.add_argument("--rounds", type=int, default=5)
    cli.add_argument("--workloads", default="cold,chat")
    cli.add_argument("--profile", default="", help="a cProfile sort key, e.g. tottime")
    cli.add_argument("--model-dir", type=Path, default=precise_dynamo.MODEL_DIR)
    cli.add_argument("--seeds", default="1,2", help="dynamo: the routing bench's seeds")
    cli.add_argument("--requests", type=int, default=90, help="dynamo: requests per seed")
    cli.add_argument("--rate", type=float, default=3.0, help="dynamo: requests per second")
    cli.add_argument("--json", type=Path, help="also write the figures here")
    args = cli.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-precise-cpu-") as work:
        best = measure(args, write_model(Path(work)))
    print(f"| part ({args.size // pick.KIB} KiB) | µs per Pick, lowest of {args.rounds} |")
    print("|---|---|")
    totals: defaultdict[str, float] = defaultdict(float)
    for part in sorted(best):
        totals[part.split(":")[0]] += best[part]
        print(f"| {part} | {best[part]:.1f} |")
    for name, total in totals.items():
        print(f"| **{name}, all parts** | **{total:.1f}** |")
    if args.json:
        args.json.write_text(json.dumps(best, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
