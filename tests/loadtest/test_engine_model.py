"""The simulated engine's prefix cache and costs, the workload generator, the hit-rate sums."""

from __future__ import annotations

import itertools
import json
import zlib
from dataclasses import dataclass, field

import pytest

from kinference.config import parse_policy
from kinference.v1 import picker_pb2 as pb
from loadtest.bench_cluster import (
    ENGINES,
    Plan,
    RunResult,
    Sample,
    Simulation,
    hit_rate,
    policy_yaml,
)
from loadtest.engine_model import Admission, EngineModel, Timing, itl_buckets
from loadtest.workloads import WorkloadSpec, request_count, workload

BLOCK = 64


def text(blocks: int, tag: str = "a") -> str:
    """`blocks` full blocks of text that differs by `tag` from the first character on."""
    unit = (tag * BLOCK)[:BLOCK]
    return "".join(f"{unit[:-4]}{i:04d}" for i in range(blocks))


def test_a_cold_prompt_hits_nothing_and_a_repeat_hits_its_full_blocks() -> None:
    engine = EngineModel(capacity_blocks=100, block_chars=BLOCK)
    prompt = text(3) + "tail"  # 3 full blocks and a partial one
    assert engine.admit(prompt) == Admission(cached_tokens=0, prompt_tokens=49)
    again = engine.admit(prompt)
    assert again.cached_tokens == 3 * BLOCK // 4
    assert again.uncached_tokens == 1  # the partial block is never cached
    assert len(engine) == 3


def test_only_a_shared_prefix_counts() -> None:
    engine = EngineModel(capacity_blocks=100, block_chars=BLOCK)
    engine.admit(text(4))
    # Same first two blocks, then different: the chain breaks at block 2 for good.
    other = text(2) + text(2, "b")
    assert engine.cached_blocks(other) == 2
    # A prompt holding the same blocks at other positions shares no prefix.
    assert engine.cached_blocks(text(2, "b") + text(2)) == 0


def test_the_completion_is_cached_for_the_next_turn() -> None:
    engine = EngineModel(capacity_blocks=100, block_chars=BLOCK)
    prompt, reply = text(2), text(2, "r")
    engine.admit(prompt, reply)
    next_turn = prompt + reply + text(1, "q")
    assert engine.admit(next_turn).cached_tokens == 4 * BLOCK // 4


def test_least_recently_used_blocks_are_evicted_first() -> None:
    engine = EngineModel(capacity_blocks=4, block_chars=BLOCK)
    engine.admit(text(2, "a"))
    engine.admit(text(2, "b"))
    engine.admit(text(2, "a"))  # touches a: b is now the oldest
    engine.admit(text(2, "c"))
    assert len(engine) == 4
    assert engine.cached_blocks(text(2, "a")) == 2
    assert engine.cached_blocks(text(2, "b")) == 0
    assert engine.cached_blocks(text(2, "c")) == 2


def test_a_prompt_larger_than_the_cache_keeps_only_its_tail() -> None:
    engine = EngineModel(capacity_blocks=3, block_chars=BLOCK)
    engine.admit(text(5))
    assert len(engine) == 3
    assert engine.cached_blocks(text(5)) == 0  # its first blocks went first


def test_times_grow_with_uncached_tokens_and_batch() -> None:
    engine = EngineModel(capacity_blocks=10, timing=Timing(jitter=0.0))
    assert engine.prefill_s(1000) > engine.prefill_s(10) > 0
    assert engine.decode_gap_s(batch=32) > engine.decode_gap_s(batch=1)
    engine.running = 8
    assert engine.decode_gap_s() == engine.decode_gap_s(batch=8)
    assert engine.decode_s(1) == 0.0


def test_same_seed_same_costs() -> None:
    first, second = EngineModel(10, seed=3), EngineModel(10, seed=3)
    assert [first.prefill_s(100) for _ in range(5)] == [second.prefill_s(100) for _ in range(5)]
    assert EngineModel(10, seed=4).prefill_s(100) != EngineModel(10, seed=3).prefill_s(100)


def test_itl_buckets_put_every_gap_in_its_layout_1_bucket() -> None:
    assert itl_buckets(0.012, 1) == []
    counts = itl_buckets(0.012, 11)
    assert len(counts) == 15
    assert counts[2] == 10  # (10, 15] ms
    assert sum(counts) == 10
    assert itl_buckets(2.0, 3)[14] == 2  # past the last edge: overflow


def test_the_workload_is_deterministic_and_chats_resend_their_history() -> None:
    spec = WorkloadSpec.for_requests(120)
    sessions = workload(spec, seed=5)
    again = workload(spec, seed=5)
    assert [turn.prompt for s in sessions for turn in s.turns] == [
        turn.prompt for s in again for turn in s.turns
    ]
    assert workload(spec, seed=6)[0].turns[0].prompt != sessions[0].turns[0].prompt
    assert abs(request_count(sessions) - 120) < 30
    assert {session.kind for session in sessions} == {"shared", "chat"}
    assert [session.index for session in sessions] == list(range(len(sessions)))
    chat = next(session for session in sessions if session.kind == "chat")
    for previous, turn in itertools.pairwise(chat.turns):
        assert turn.prompt.startswith(previous.prompt + previous.completion)
        assert turn.messages[: len(previous.messages)] == previous.messages


def test_bodies_are_chat_completions_of_the_turn() -> None:
    turn = workload(WorkloadSpec.for_requests(20), seed=1)[0].turns[0]
    body = turn.body()
    request = json.loads(b"".join(body.chunks))
    assert body.length == sum(len(chunk) for chunk in body.chunks)
    assert request["model"] == "sim-model"
    assert [m["content"] for m in request["messages"]] == [c for _, c in turn.messages]


def test_the_policy_parses_with_the_pickers_own_loader() -> None:
    policy = parse_policy(policy_yaml(1234), source="<bench>")
    assert policy.routing.prefix.lru_blocks_per_worker == 1234


def test_hit_rate_is_cached_over_prompt_tokens_and_imbalance_max_over_mean() -> None:
    samples = [
        Sample(ENGINES[0], cached_tokens=90, prompt_tokens=100, pick_ms=1.0, degraded=False),
        Sample(ENGINES[0], cached_tokens=0, prompt_tokens=300, pick_ms=3.0, degraded=True),
    ]
    assert hit_rate(samples) == pytest.approx(90 / 400)
    result = RunResult("x", samples, 1.0)
    assert result.imbalance == pytest.approx(2 / (2 / len(ENGINES)))
    assert result.degraded == 1
    assert result.pick_ms(0.5) == 3.0
    assert result.redis_per_request() is None


@dataclass
class FakePicker:
    """Stands in for a PickerClient: picks the engine `choose` names, records the calls."""

    choose: str  # "sticky": one engine per session; "spread": round-robin over engines
    calls: list[str] = field(default_factory=list)
    _bodies: dict[int, bytes] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _turns: itertools.count[int] = field(default_factory=itertools.count)

    async def push(self, chunks: tuple[bytes, ...], *, declared_length: int) -> pb.PushBodyResponse:
        stream_id = next(self._ids)
        self._bodies[stream_id] = b"".join(chunks)
        return pb.PushBodyResponse(stream_id=stream_id, total_bytes=declared_length)

    async def pick(self, stream_id: int, *, tenant: str) -> pb.PickResponse:
        body = self._bodies[stream_id]
        first_question = json.loads(body)["messages"][1]["content"]  # names the session
        key = zlib.crc32(first_question.encode()) if self.choose == "sticky" else next(self._turns)
        endpoint = ENGINES[key % len(ENGINES)]
        return pb.PickResponse(
            outcome=pb.PickResponse.OK,
            local=pb.LocalTarget(endpoint=endpoint),
            response_id=stream_id,
            body_total_bytes=len(body),
        )

    async def pull_all(self, response_id: int) -> bytes:
        return self._bodies.pop(response_id)

    async def first_token(self, response_id: int, ttft_ms: int) -> None:
        self.calls.append("first")

    async def final_token(self, response_id: int, **report: object) -> None:
        assert report["cached_tokens"] is not None
        self.calls.append("final")


async def simulate(choose: str) -> tuple[float, FakePicker]:
    sessions = workload(WorkloadSpec.for_requests(150), seed=2)
    picker = FakePicker(choose)
    plan = Plan("test", 1, 150, 2, callers=1, users=8, time_scale=0.0, capacity_blocks=0)
    simulation = Simulation([picker], plan, capacity_blocks=600)  # type: ignore[list-item]
    samples = await simulation.run(sessions)
    assert len(samples) == request_count(sessions)
    return hit_rate(samples), picker


async def test_in_process_sticky_routing_beats_spreading_the_turns() -> None:
    sticky, picker = await simulate("sticky")
    spread, _ = await simulate("spread")
    assert picker.calls.count("first") == picker.calls.count("final") > 0
    assert sticky > spread + 0.1
