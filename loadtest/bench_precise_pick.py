"""Pick latency in precise prefix mode against approximate mode, for 4 KiB, 64 KiB and 1 MiB
prompts, and the event loop's worst stall while those Picks run.

    python -m loadtest.bench_precise_pick [--quick] [--sizes 4096,65536,1048576]
        [--turn-gap-ms 100] [--cold-gap-ms 0] [--repeat 1] [--json FILE] [--picker-nice N]
    python -m loadtest.bench_precise_pick --pool FILE...

One picker (the real server on uvloop) in its own process (`loadtest.picker_process`),
with a pool of 4 endpoints whose "engines" are ZMQ publishers in this one, the client's:
after each Pick, the chosen engine publishes `BlockStored` for the prompt's blocks (vLLM's
encoding), as a real engine would once it has run the prompt, so precise Picks walk real
matches. Each stand-in engine remembers what it stored (it never evicts)
and announces only the blocks it did not hold, as an engine does: a conversation's next
turn on the same engine stores only its new blocks. The tokenizer is a byte-level BPE
trained on a few words (`loadtest.tiny_model`, like the one Dynamo's mocker runs with): no
model hub here.

Workloads per prompt size S, each run in approximate mode (the baseline) and precise mode:
- `cold`: distinct prompts of S characters, each picked once (nothing to reuse);
- `chat`: conversations on one shared S-character system prompt, 6 turns each (user and
  assistant messages of a few hundred characters), at 1 and 16 conversations in flight; a
  turn comes `--turn-gap-ms` after the previous one's Pick (the engine runs the prompt and
  generates the reply the next turn resends: 100 ms is a short reply on a fast engine).
  At 16 in flight the conversations of a wave start together and stay in step, so their
  turns come as bursts of 16 at once (the worst case: each burst's last Pick waits for the
  other 15); `chat-spread` x16 is the same conversations started one turn gap apart over
  the wave (conversation i of 16 begins i/16 of a gap later), the steady 16 in flight of
  users who did not all press enter in the same millisecond.
  `--cold-gap-ms` (default 0: back to back) pauses before each cold prompt after the first:
  back to back, a 64 KiB prompt's rest, tokenized in the background after its Pick (~20 ms
  of CPU with the bench's tokenizer), overlaps the next prompt's Pick on a 2-core machine.
Reported per run of a row (stderr) and pooled over a row's runs (the table;
`loadtest.precise_pick_stats`): client-side Pick RPC p50 / p90 / p99 / max (ms) over the
Picks themselves (nearest rank: a p99 over fewer than 100 Picks is the slowest), how many
Picks took over 5 ms (issue 16's target at 64 KiB), the largest lag of a 2 ms probe task
on the picker process's loop during the workload (ms) and how many of its wake-ups came
over 10 ms late, and the PushBody + Pick p50 / p99 (ms): work the picker begins at push (a
body's parse and tokenization, `kinference/early.py`) leaves the Pick's figure but not that
one. Chat rows add the first turns' Pick p50 / max apart from the later turns', and how
many of the slowest 2 % are first turns.

Pooling: `--repeat N` runs every row N times in one process (each run with its own picker
process and engines; rows interleaved, the prompts prepared once); `--json FILE` writes
every run's Picks, loop stalls, start time and load (after each row, so a run cut short
keeps what it did); `--pool FILE...` prints the pooled table of such files (separate
processes, separate locked commands) without running anything.

`--picker-nice N` starts each picker at scheduling priority N (its threads and parse workers
inherit it; a negative N needs CAP_SYS_NICE): on a shared 2-core machine most loop stalls
over 10 ms were the picker's loop runnable and waiting for a core that this process's
clients or other work had (docs/benchmarks.md, h180); at -10 the figures are the picker's.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import uvloop

from kinference.client import PickerClient, split_chunks
from kinference.tokenize.tokenizer import PromptText, PromptTokenizer
from loadtest.kv_publisher import EngineBlocks, HeldBlocks, KvPublisher
from loadtest.picker_process import PickerProcess
from loadtest.precise_pick_stats import Row, dump, load, per_run, spread, table
from loadtest.tiny_model import WORDS, write_model

MODEL = "tiny"
SPREAD = "chat-spread"  # the x16 chats started a turn gap apart (see the docstring)
BLOCK = 16
KIB = 1024


def by_turn(row: Row) -> str:
    """Pick p50 / max (ms) of the conversations' first turns and of the later ones, and how
    many of the slowest 2 % are first turns: at x16 in step only the first turns come as a
    burst (each later turn comes a gap after its own previous Pick, whose times spread)."""
    if not any(row.turns):
        return ""
    first = sorted(s for s, t in zip(row.samples, row.turns, strict=True) if t == 0)
    later = sorted(s for s, t in zip(row.samples, row.turns, strict=True) if t)
    slowest = sorted(zip(row.samples, row.turns, strict=True))[-max(1, len(row.samples) // 50) :]
    return (
        f"; first turns p50 {first[len(first) // 2] * 1000:.2f} max {first[-1] * 1000:.2f} ms,"
        f" later turns p50 {later[len(later) // 2] * 1000:.2f} max {later[-1] * 1000:.2f} ms,"
        f" {sum(1 for _, t in slowest if t == 0)} of the slowest {len(slowest)} first turns"
    )


def words(rng: random.Random, chars: int) -> str:
    parts, total = [], 0
    while total < chars:
        word = rng.choice(WORDS) + rng.choice((" ", " ", ", ", ".\n"))
        parts.append(word)
        total += len(word)
    return "".join(parts)[:chars]


class Bench:
    def __init__(
        self,
        mode: str,
        files: tuple[Path, Path],
        publishers: list[KvPublisher],
        trace_stalls: bool = False,
        picker_nice: int | None = None,
    ):
        self.mode = mode
        self.trace_stalls = trace_stalls
        self.picker_nice = picker_nice
        self.publishers = publishers
        self.endpoints = [f"127.0.0.1:{p.port}" for p in publishers]
        endpoints = ", ".join(f'"{e}"' for e in self.endpoints)
        prefix = (
            f'{{mode: precise, events: "tcp://{{host}}:{{port}}", tokenizer: {files[0]}, '
            f"chat_template: {files[1]}, block_size: {BLOCK}}}"
            if mode == "precise"
            else "{mode: approximate}"
        )
        self.policy_file = files[0].parent / f"policy-{mode}.yaml"
        self.policy_file.write_text(
            f"pools:\n  - name: p\n    endpoints: [{endpoints}]\n    models: [{MODEL}]\n"
            f"    prefix: {prefix}\n"
        )
        self.picker: PickerProcess | None = None
        self.client: PickerClient | None = None
        self.held = [HeldBlocks() for _ in publishers]

    async def __aenter__(self) -> Bench:
        self.picker = await PickerProcess.start(
            self.policy_file, self.trace_stalls, self.picker_nice
        )
        self.client = PickerClient(f"127.0.0.1:{self.picker.port}")
        if self.mode == "precise":
            await asyncio.gather(*(p.subscribed() for p in self.publishers))
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.client is not None and self.picker is not None
        await self.client.close()
        await self.picker.aclose()

    async def pick(self, prompt: Prompt) -> tuple[float, float]:
        """The Pick's time and the PushBody's and Pick's together (s)."""
        assert self.client is not None
        pushing = time.perf_counter()
        pushed = await self.client.push(split_chunks(prompt.body), declared_length=len(prompt.body))
        started = time.perf_counter()
        picked = await self.client.pick(pushed.stream_id)
        ended = time.perf_counter()
        elapsed = (ended - started, ended - pushing)
        if picked.WhichOneof("destination") != "local":
            raise RuntimeError(f"no local destination: {picked.reason}")
        await self.client.abort(picked.response_id, detail="bench")
        engine = self.endpoints.index(picked.local.endpoint)
        for batch in self.held[engine].run(prompt.blocks):  # it ran it, step by step
            await self.publishers[engine].send(batch)
        return elapsed


@dataclass(frozen=True)
class Prompt:
    body: bytes
    blocks: EngineBlocks  # what its engine announces after running it


def prepare(tokenizer: PromptTokenizer, messages: list[dict[str, str]]) -> Prompt:
    body = json.dumps({"model": MODEL, "messages": messages, "max_tokens": 8}).encode()
    tokens = tokenizer.token_ids(PromptText(messages=messages)).tolist()
    return Prompt(body, EngineBlocks(tokens, BLOCK))


def cold_prompts(tokenizer: PromptTokenizer, size: int, count: int) -> list[list[Prompt]]:
    rng = random.Random(size)
    return [
        [prepare(tokenizer, [{"role": "user", "content": words(rng, size)}])] for _ in range(count)
    ]


def chat_prompts(
    tokenizer: PromptTokenizer, size: int, count: int, turns: int = 6
) -> list[list[Prompt]]:
    """`count` conversations of `turns` turns on one shared system prompt."""
    rng = random.Random(size)
    system = {"role": "system", "content": words(rng, size)}
    conversations = []
    for _ in range(count):
        history, prompts = [system], []
        for _ in range(turns):
            history = [*history, {"role": "user", "content": words(rng, 200)}]
            prompts.append(prepare(tokenizer, history))
            history = [*history, {"role": "assistant", "content": words(rng, 400)}]
        conversations.append(prompts)
    return conversations


async def replay(
    bench: Bench,
    row: Row,
    conversations: list[list[Prompt]],
    gap_s: float = 0.0,
    wave_gap_s: float = 0.0,
) -> None:
    """Each wave of `row.inflight` conversations at once, turn after turn, `wave_gap_s`
    after the previous wave's end; a `chat-spread` wave's conversation i starts i /
    inflight of a turn gap after the first."""
    spread = row.workload == SPREAD

    async def one(turns: list[Prompt], start_s: float) -> None:
        if start_s:
            await asyncio.sleep(start_s)
        for index, prompt in enumerate(turns):
            if index:
                await asyncio.sleep(gap_s)
            pick, with_push = await bench.pick(prompt)
            row.samples.append(pick)
            row.turns.append(index)
            row.with_push.append(with_push)

    for start in range(0, len(conversations), row.inflight):
        if start and wave_gap_s:
            await asyncio.sleep(wave_gap_s)
        wave = conversations[start : start + row.inflight]
        starts = [i * gap_s / len(wave) if spread else 0.0 for i in range(len(wave))]
        await asyncio.gather(*(one(c, s) for c, s in zip(wave, starts, strict=True)))


async def measure(args: argparse.Namespace, files: tuple[Path, Path]) -> list[Row]:
    rows: list[Row] = []
    tokenizer = PromptTokenizer.from_files(str(files[0]), str(files[1]), BLOCK)
    for size in (int(s) for s in args.sizes.split(",")):
        # At least 32 cold prompts and 8 conversations of 64 KiB, so that p99 means something.
        least = 4 if args.quick or size > 64 * KIB else 32
        count = max(least, (64 if args.quick else 256) * KIB // max(size, 4 * KIB))
        workloads = {
            ("cold", 1): cold_prompts(tokenizer, size, count),
            ("chat", 1): chat_prompts(tokenizer, size, max(least // 4, count // 4)),
            # 1 MiB prompts: 2 turns each, so the prepared payloads stay in memory.
            ("chat", 16): chat_prompts(
                tokenizer, size, 16 if args.quick else 32, 6 if size <= 256 * KIB else 2
            ),
        }
        workloads[SPREAD, 16] = workloads["chat", 16]
        # The prepared prompts (millions of token ids in lists) are the bench's, not the
        # picker's: out of the collector's sight, as a deployed process's startup state is.
        gc.collect()
        gc.freeze()
        for run in range(args.repeat):  # each run of a row: a fresh picker and engines
            for (workload, inflight), conversations in workloads.items():
                if args.workloads and f"{workload}x{inflight}" not in args.workloads.split(","):
                    continue
                for mode in args.modes.split(","):
                    row = Row(size, workload, inflight, mode, run)
                    wave_gap_s = args.cold_gap_ms / 1000 if workload == "cold" else 0.0
                    gaps = (args.turn_gap_ms / 1000, wave_gap_s)
                    picker = {"trace_stalls": args.trace_stalls, "picker_nice": args.picker_nice}
                    await run_row(files, row, conversations, gaps, **picker)
                    rows.append(row)
                    print(_line(row), file=sys.stderr, flush=True)
                    if args.json:  # after every row: a run cut short keeps what it measured
                        dump(rows, {"args": {k: str(v) for k, v in vars(args).items()}}, args.json)
        gc.unfreeze()
    return rows


async def run_row(
    files: tuple[Path, Path],
    row: Row,
    conversations: list[list[Prompt]],
    gaps: tuple[float, float],
    *,
    trace_stalls: bool = False,
    picker_nice: int | None = None,
) -> None:
    """`gaps`: between a conversation's turns and before each wave after the first (s)."""
    publishers = [KvPublisher() for _ in range(4)]
    row.started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    before = os.getloadavg()[0]
    try:
        async with Bench(row.mode, files, publishers, trace_stalls, picker_nice) as bench:
            assert bench.picker is not None
            await bench.picker.lag()  # from here: the picker's startup is not the workload's
            await replay(bench, row, conversations, *gaps)
            row.lag_s, row.stalls = await bench.picker.lag()
        row.load = (before, os.getloadavg()[0])
    finally:
        for publisher in publishers:
            publisher.close()


def _line(row: Row) -> str:
    return (
        f"{row.size // KIB} KiB {row.workload} x{row.inflight} {row.mode}: "
        f"{spread(row.samples)} lag {row.lag_s * 1000:.1f} ms ({row.stalls} over 10 ms)"
        f" push+pick p50 {row.pct(0.5, True):.2f} ms p99 {row.pct(0.99, True):.2f} ms"
        f" ({len(row.samples)} picks; run {row.run}, {row.started}, load"
        f" {row.load[0]:.2f} -> {row.load[1]:.2f}){by_turn(row)}"
    )


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--quick", action="store_true")
    cli.add_argument("--sizes", default=f"{4 * KIB},{64 * KIB},{1024 * KIB}")
    cli.add_argument("--turn-gap-ms", type=float, default=100.0)
    cli.add_argument("--cold-gap-ms", type=float, default=0.0, help="pause before a cold prompt")
    cli.add_argument("--modes", default="approximate,precise", help="for profiling one")
    cli.add_argument("--workloads", default="", help="e.g. coldx1,chatx16 (default: all)")
    cli.add_argument(
        "--trace-stalls", action="store_true", help="the picker logs callbacks over 10 ms"
    )
    cli.add_argument(
        "--picker-nice",
        type=int,
        help="the picker's priority, e.g. -10 (CAP_SYS_NICE): its loop not waiting for a core",
    )
    cli.add_argument("--repeat", type=int, default=1, help="runs of each row, pooled")
    cli.add_argument("--json", type=Path, help="write every run's Picks here")
    cli.add_argument("--pool", type=Path, nargs="+", help="only pool these --json files")
    args = cli.parse_args(argv)
    if args.pool:
        rows = load(args.pool)
        print(f"{table(rows)}\n\n{per_run(rows)}")
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-precise-") as work:
        files = write_model(Path(work))
        rows = uvloop.run(measure(args, files))
    print(f"{table(rows)}\n\n{per_run(rows)}")
    print(f"\n{statistics.mean(len(r.samples) for r in rows):.0f} picks per row-run on average")
    return 0


if __name__ == "__main__":
    sys.exit(main())
