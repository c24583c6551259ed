"""h153: a precise Pick's tokenization CPU on the routing benchmark's Dynamo-shaped bodies.

    python docs/h153/mb.py [--seeds 1,2] [--rate 3] [--requests 36] [--rounds 3] [--stamps]

Replays `loadtest.routing_bench` bodies (BenchSpec, the mocker's model /tmp/dynamo-model,
block 16) in send order through `PromptPreparer.prepare` on a real `PreciseCaches` pool of
4 workers fed with the engines' events (`loadtest.kv_publisher`: every full block stored on
the worker chosen by the longest match, else round-robin), the background rest drained
between Picks (3 req/s leaves ~300 ms). Per Pick: the loop thread's CPU and wall in
`prepare`, by class (chat first turn, chat follow-up, doc, shared). `--stamps`: the thread
CPU of named steps (wrapped; adds overhead) summed per class.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import statistics
import sys
import time
from pathlib import Path

from kinference.bodies import Body
from kinference.config import parse_policy
import numpy as np

from kinference.kvcache.blocks import identities
from kinference.kvcache.pool import PoolCaches
from kinference.kvcache.precise import PreciseCaches
from kinference.kvevents.wire import decode_batch
from kinference.requests.parse import parse_request
from kinference.tokenize.prepare import PromptPreparer
from kinference.tokenize.tokenizer import PromptText, PromptTokenizer
from loadtest.kv_publisher import EngineBlocks
from loadtest.routing_bench.replay import request_body
from loadtest.routing_bench.workload import MODEL, BenchSpec, conversations

MODEL_DIR = Path("/tmp/dynamo-model")
BS, SLOTS = 16, 4
POLICY = f"""
pools:
- namespace: default
  name: sim
  endpoints: [{", ".join(f"127.0.0.1:{9000 + i}" for i in range(SLOTS))}]
  models: [{MODEL}]
  engine: vllm
  prefix:
    mode: precise
    events: "tcp://{{host}}:{{port+1000}}"
    tokenizer: {MODEL_DIR / "tokenizer.json"}
    chat_template: {MODEL_DIR / "tokenizer_config.json"}
    block_size: {BS}
"""


def bodies(seed: int, rate: float, requests: int) -> list[tuple[str, bytes]]:
    timed = []
    for conversation in conversations(BenchSpec(), requests, rate, seed):
        at = conversation.arrival_s
        for index, turn in enumerate(conversation.turns):
            if index:
                at += 1.0 + conversation.think_s[index - 1]
            replies = [earlier.completion for earlier in conversation.turns[:index]]
            kind = conversation.kind
            if kind == "chat":
                kind = "chat-first" if index == 0 else "chat-next"
            timed.append((at, conversation.index, index, kind, request_body(turn, replies)))
    timed.sort()
    return [(kind, body) for *_, kind, body in timed]


STAMPS: collections.defaultdict[str, float] = collections.defaultdict(float)


def wrap(owner: object, name: str, label: str) -> None:
    original = getattr(owner, name)

    def wrapped(*args, **kwargs):  # type: ignore[no-untyped-def]
        started = time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            STAMPS[label] += time.thread_time() - started

    setattr(owner, name, wrapped)


def install_stamps() -> None:
    from kinference.kvcache import pool, reach
    from kinference.tokenize import lazy, prepare, pieces, template, tokenizer, turns

    wrap(prepare, "prompt_text", "prompt_text")
    wrap(template.ChatTemplate, "render", "render")
    wrap(turns.TurnMarks, "find", "marks.find")
    wrap(turns.TurnMarks, "put", "marks.put")
    wrap(tokenizer.PromptTokenizer, "start", "start (render+find)")
    wrap(lazy.Tokenization, "advance", "advance")
    wrap(tokenizer.PromptTokenizer, "tokens", "tokens (cache+encode)")
    wrap(tokenizer.PromptTokenizer, "_encode", "_encode")
    wrap(pieces.CutChecks, "first_good", "first_good")
    wrap(pieces.Cutter, "next_pieces", "next_pieces")
    wrap(lazy, "identities", "identities")
    wrap(pool.PoolCaches, "reach", "caches.reach")
    wrap(reach.Reach, "__call__", "known()")
    wrap(prepare.PromptPreparer, "_blocks", "_blocks")
    wrap(
        lazy.Tokenization,
        "leave_marks" if hasattr(lazy.Tokenization, "leave_marks") else "_leave_mark",
        "leave marks",
    )
    from kinference.tokenize import worker

    wrap(worker.TokenizerThread, "here", "here (the loop's share)")


async def round_(
    seed: int, rate: float, requests: int, stamps: bool
) -> list[tuple[str, float, float, dict]]:
    policy = parse_policy(POLICY)
    caches = PreciseCaches()
    ref = policy.pools[0].ref
    pool = caches.pools[ref] = PoolCaches(ref, BS)
    preparer = PromptPreparer(policy, caches=caches)
    await preparer.warmed()
    full = PromptTokenizer.from_files(
        str(MODEL_DIR / "tokenizer.json"), str(MODEL_DIR / "tokenizer_config.json"), BS
    )
    held: list[set[int]] = [set() for _ in range(SLOTS)]
    out = []
    for number, (kind, raw) in enumerate(bodies(seed, rate, requests)):
        body = Body([raw], reserved=len(raw))
        request = parse_request(body)
        STAMPS.clear()
        wall, cpu = time.perf_counter(), time.thread_time()
        query = await preparer.prepare(request, body)
        cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
        steps = dict(STAMPS)
        if stamps:
            steps["prepare"] = cpu
        assert query is not None and query.problem is None, query
        blocks = query.blocks[ref]
        longest = pool.index.longest(blocks.blocks, range(SLOTS))
        slot = max(range(SLOTS), key=lambda s: (longest.get(s, 0), s == number % SLOTS))
        caches.routed(ref, slot, longest.get(slot, 0), blocks, key=number)
        # the engine ran it: events for the blocks it did not hold
        text = PromptText(messages=json.loads(raw)["messages"])
        tokens = [int(t) for t in full.token_ids(text)]
        exact_ids = identities(np.asarray(tokens, dtype=np.uint32), BS)
        assert list(blocks.blocks) == exact_ids[: len(blocks.blocks)], "block identities differ"
        steps["token error"] = abs(blocks.tokens - len(tokens)) / 1e3
        steps["exact"] = float(blocks.exact) / 1e3
        out.append((kind, cpu * 1e3, wall * 1e3, steps))
        engine = EngineBlocks(tokens, BS)
        start = 0
        while start < len(engine.hashes) and engine.hashes[start] in held[slot]:
            start += 1
        held[slot].update(engine.hashes[start:])
        for payload in engine.payloads(start):
            pool.apply(slot, decode_batch(payload).events)
        for _ in range(200):  # let the background rest finish (3 req/s: ~300 ms apart)
            await asyncio.sleep(0.002)
            if not preparer._thread._later and not preparer._thread._busy.locked():
                break
        await asyncio.sleep(0)
    preparer.close()
    return out


def main() -> None:
    cli = argparse.ArgumentParser()
    cli.add_argument("--seeds", default="1,2")
    cli.add_argument("--rate", type=float, default=3.0)
    cli.add_argument("--requests", type=int, default=40)
    cli.add_argument("--rounds", type=int, default=3)
    cli.add_argument("--stamps", action="store_true")
    cli.add_argument("--json", type=Path)
    args = cli.parse_args()
    if args.stamps:
        install_stamps()
    by: collections.defaultdict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    steps: collections.defaultdict[str, collections.defaultdict[str, list[float]]] = (
        collections.defaultdict(lambda: collections.defaultdict(list))
    )
    for _ in range(args.rounds):
        for seed in map(int, args.seeds.split(",")):
            for kind, cpu, wall, st in asyncio.run(
                round_(seed, args.rate, args.requests, args.stamps)
            ):
                by[kind].append((cpu, wall))
                by["all"].append((cpu, wall))
                for k, v in st.items():
                    steps[kind][k].append(v * 1e3)
    result = {}
    for kind, rows in sorted(by.items()):
        cpus, walls = [r[0] for r in rows], [r[1] for r in rows]
        result[kind] = {
            "n": len(rows),
            "cpu_p50": statistics.median(cpus),
            "wall_p50": statistics.median(walls),
            "cpu_mean": statistics.fmean(cpus),
            "wall_mean": statistics.fmean(walls),
        }
        print(
            f"{kind:11s} n={len(rows):3d} cpu p50 {statistics.median(cpus):.3f} mean {statistics.fmean(cpus):.3f}  wall p50 {statistics.median(walls):.3f} mean {statistics.fmean(walls):.3f} ms"
        )
        if kind in steps:
            errors = steps[kind]["token error"]
            print(
                f"    tokens |estimate - exact| mean {statistics.fmean(errors):.1f}, max {max(errors):.0f}; exact answers {sum(steps[kind]['exact'])} of {len(errors)}"
            )
            result[kind]["token_error_mean"] = statistics.fmean(errors)
        if args.stamps and kind in steps:
            n = len(rows)
            for k, v in sorted(steps[kind].items(), key=lambda kv: -sum(kv[1])):
                print(f"    {k:24s} {sum(v) / n:.3f} ms/Pick")
    if args.json:
        args.json.write_text(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
