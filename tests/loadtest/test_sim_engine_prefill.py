"""The simulated engine prefills in turn, in budgeted steps (`loadtest/sim_engine/prefill.py`).

Every test runs on virtual time (`tests/virtual_time.py`) with jitter off, so TTFTs and
gaps are the cost model's exact figures whatever the machine's load.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from loadtest.engine_model import EngineModel, Timing
from loadtest.sim_engine.prefill import Prefill, PrefillLane, SideBySide
from loadtest.sim_engine.scheduler import Job, Scheduler
from tests.loadtest.conftest import prose
from tests.virtual_time import run_virtual

TIMING = Timing(jitter=0.0)
BASE, PER_TOKEN, GAP = TIMING.prefill_base_s, TIMING.prefill_s_per_token, TIMING.decode_gap_s
DOC_TOKENS = 12_000  # 750 blocks of 16 tokens


@dataclass
class Seen:
    """The observer: each job's TTFT and decode gaps, by prompt tag."""

    ttft: dict[str, float] = field(default_factory=dict)
    gaps: dict[str, list[float]] = field(default_factory=dict)

    def scheduled(self, job: Job) -> None:
        pass

    def first_token(self, job: Job, ttft_s: float) -> None:
        self.ttft[job.model] = ttft_s

    def decoded(self, job: Job, gap_s: float, tokens: int) -> None:
        self.gaps.setdefault(job.model, []).extend([gap_s] * tokens)

    def finished(self, job: Job) -> None:
        pass


class Engine:
    """One engine's scheduler on the running (virtual-time) loop; jobs named by a tag."""

    def __init__(self, *, budget: int = 8192, side_by_side: bool = False) -> None:
        self.model = EngineModel(4096, 64, 0, chars_per_token=4, timing=TIMING)
        self.lane: Prefill = (
            SideBySide(self.model, time_scale=1.0)
            if side_by_side
            else PrefillLane(self.model, budget_tokens=budget, time_scale=1.0)
        )
        self.seen = Seen()
        self.scheduler = Scheduler(
            self.model,
            self.seen,
            self.lane,
            max_num_seqs=64,
            time_scale=1.0,
            stream_step_s=0.0,
            clock=asyncio.get_running_loop().time,
        )

    def start(self, tag: str, prompt: str, tokens: int = 2) -> asyncio.Task[None]:
        """Send a request (its tag stands in the job's model name); the task ends with it."""
        job = Job(tag, prompt, "r" * 4 * tokens, tokens, asyncio.get_running_loop().time())

        async def consume() -> None:
            async for _ in self.scheduler.generate(job):
                pass

        return asyncio.create_task(consume())


def prefill(tokens: int, steps: int = 1) -> float:
    return steps * BASE + tokens * PER_TOKEN


def test_two_prompts_admitted_together_prefill_in_one_step_not_side_by_side() -> None:
    async def main() -> tuple[Seen, Seen]:
        runs = []
        for side_by_side in (False, True):
            engine = Engine(side_by_side=side_by_side)
            await asyncio.gather(
                engine.start("a", prose(100, "a")), engine.start("b", prose(50, "b"))
            )
            runs.append(engine.seen)
        return runs[0], runs[1]

    in_turn, side_by_side = run_virtual(main())
    # 1600 + 800 tokens in one step of the budget: the second waits for both.
    assert in_turn.ttft == pytest.approx({"a": prefill(2400), "b": prefill(2400)})
    assert side_by_side.ttft == pytest.approx({"a": prefill(1600), "b": prefill(800)})


def test_chunks_of_the_budget_go_first_come_first_served() -> None:
    async def main() -> Seen:
        engine = Engine(budget=512)
        await asyncio.gather(engine.start("a", prose(100, "a")), engine.start("b", prose(50, "b")))
        return engine.seen

    seen = run_virtual(main())
    # Steps: a 512, a 512, a 512, a 64 + b 448 (a's first token), b 352.
    assert seen.ttft["a"] == pytest.approx(prefill(2048, steps=4))
    assert seen.ttft["b"] == pytest.approx(prefill(2400, steps=5))


def test_a_hit_behind_a_cold_document_waits_for_it() -> None:
    system = prose(20, "system")  # 320 tokens, cached after the first question

    async def main(side_by_side: bool) -> float:
        engine = Engine(side_by_side=side_by_side)
        await engine.start("warm", system + prose(2, "q1"))
        document = engine.start("doc", prose(DOC_TOKENS // 16, "doc"))
        await asyncio.sleep(0.01)
        await engine.start("hit", system + prose(2, "q2"))
        await document
        return engine.seen.ttft["hit"]

    in_turn, side_by_side = run_virtual(main(False)), run_virtual(main(True))
    own = 2 * 16  # the question's two blocks; the system prompt is cached
    assert side_by_side == pytest.approx(prefill(own))
    # The document's first step (8192 tokens) was under way; its last 3808 share the next.
    assert in_turn == pytest.approx(prefill(DOC_TOKENS + own, steps=2) - 0.01)


def test_a_client_gone_while_waiting_frees_the_lane() -> None:
    async def main() -> tuple[dict[str, float], list[int]]:
        engine = Engine()
        lane = engine.lane
        assert isinstance(lane, PrefillLane)
        document = engine.start("doc", prose(DOC_TOKENS // 16, "doc"))
        await asyncio.sleep(0.1)
        waiting = engine.start("gone", prose(10, "gone"))  # behind the document's first step
        await asyncio.sleep(0.1)
        queued = [lane.queued]
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        queued.append(lane.queued)
        behind = engine.start("behind", prose(10, "behind"))  # arrives at 0.2 s
        await asyncio.sleep(0.1)
        document.cancel()  # mid-way through its first step
        await asyncio.gather(document, return_exceptions=True)
        queued.append(lane.queued)
        await behind
        queued.append(lane.queued)
        await engine.start("alone", prose(10, "alone"))
        queued.append(engine.scheduler.running)
        return engine.seen.ttft, queued

    ttft, queued = run_virtual(main())
    assert queued == [2, 1, 1, 0, 0]
    # The document's first step ends for the others in it; its other 3808 tokens never run.
    assert ttft["behind"] == pytest.approx(prefill(8192) + prefill(160) - 0.2)
    assert ttft["alone"] == pytest.approx(prefill(160))
    assert "doc" not in ttft and "gone" not in ttft


def test_decode_gaps_are_unchanged_when_no_prefill_runs() -> None:
    async def main(side_by_side: bool) -> Seen:
        engine = Engine(side_by_side=side_by_side)
        await engine.start("solo", prose(4, "solo"), tokens=20)
        return engine.seen

    for seen in (run_virtual(main(False)), run_virtual(main(True))):
        assert seen.ttft["solo"] == pytest.approx(prefill(64))
        assert seen.gaps["solo"] == [pytest.approx(GAP)] * 19


def test_a_prefill_beside_the_decodes_holds_each_back_by_its_tokens() -> None:
    async def main(side_by_side: bool) -> Seen:
        engine = Engine(side_by_side=side_by_side)
        decoding = engine.start("decoding", prose(4, "decoding"), tokens=200)
        await asyncio.sleep(0.5)
        await engine.start("doc", prose(DOC_TOKENS // 16, "doc"), tokens=10)
        await decoding
        return engine.seen

    in_turn, side_by_side = run_virtual(main(False)), run_virtual(main(True))
    plain = GAP + TIMING.decode_gap_s_per_seq  # two sequences running
    assert max(side_by_side.gaps["decoding"]) == pytest.approx(plain)
    held = [gap for gap in in_turn.gaps["decoding"] if gap > plain * 1.5]
    # Once per step of the document (8192 and 3808 tokens), by that step's prompt tokens:
    # the first with two sequences running, the second once the document had finished.
    assert held == [
        pytest.approx(plain + 8192 * PER_TOKEN),
        pytest.approx(GAP + 3808 * PER_TOKEN),
    ]
    # The document's own steps end before its decode begins: its gaps are not held.
    assert max(in_turn.gaps["doc"]) == pytest.approx(plain)


def test_the_lane_needs_a_budget() -> None:
    with pytest.raises(ValueError, match="budget_tokens"):
        PrefillLane(EngineModel(16), budget_tokens=0, time_scale=1.0)
