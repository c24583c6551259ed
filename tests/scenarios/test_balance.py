"""Prefix affinity, spreading and hot-spot protection over four fake vLLM engines."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from kinference.v1 import picker_pb2 as pb
from tests.api.helpers import first_token_after
from tests.conftest import PickerFactory, RunningPicker
from tests.scenarios.helpers import (
    EnginesFactory,
    chat,
    endpoints_yaml,
    finish,
    pick_ok,
    routing_yaml,
    start_with,
    system_prompt,
    vllm_pool,
    wait_engines,
    where,
)

MODEL = "llama-8b-instruct"
WORKERS = 4
BATCH = 8  # the pools' max_batch in the queue tests (their engines' batch)


async def _cluster(start_engines: EnginesFactory, start_picker: PickerFactory) -> RunningPicker:
    engines = await start_engines(WORKERS)
    policy = "pools:\n" + vllm_pool("chat", engines.endpoints, [MODEL]) + routing_yaml()
    picker = await start_with(start_picker, policy)
    await wait_engines(picker, engines.endpoints)
    return picker


async def _pick_finished(picker: RunningPicker, body: bytes) -> str:
    """Pick, pull and report the end, so the pick leaves no load behind; returns where."""
    result = await pick_ok(picker, body)
    await finish(picker, result, prompt_tokens=10, completion_tokens=5)
    return where(result)


async def test_shared_system_prompt_sticks_to_one_worker_while_other_prompts_spread(
    start_engines: EnginesFactory, start_picker: PickerFactory
) -> None:
    picker = await _cluster(start_engines, start_picker)
    system = system_prompt("billing")
    home = await _pick_finished(picker, chat(MODEL, "How do I read my invoice?", system))

    questions = [f"Question {i}: why was I charged {i * 7} euros in month {i}?" for i in range(8)]
    for question in questions:
        assert await _pick_finished(picker, chat(MODEL, question, system)) == home

    others: Counter[str] = Counter()
    for i in range(24):
        body = chat(MODEL, "Summarise the handbook.", system_prompt(f"topic-{i}"))
        others[await _pick_finished(picker, body)] += 1
    # Prompts that share nothing tie on every signal: the random tie-break spreads them
    # (all 24 on two workers or fewer has a probability of about 1e-5).
    assert len(others) >= 3, others

    # The shared prompt's worker is still its home after the other traffic.
    assert await _pick_finished(picker, chat(MODEL, "One more question.", system)) == home


async def _pick_started(picker: RunningPicker, body: bytes) -> pb.PickResponse:
    """Pick and report the first token (its prefill is done), leaving it in flight."""
    result = await pick_ok(picker, body)
    assert (await first_token_after(picker, result.response_id, 40)).acknowledged
    return result


async def _unscraped(
    start_engines: EnginesFactory, start_picker: PickerFactory, workers: int = WORKERS
) -> RunningPicker:
    """The pool without engine metrics: load is the in-flight picks (the fake engines would
    read idle whatever is held, as they serve nothing). Its batch is configured: learned
    from TTFT, it would grow with every first token that came without a queue."""
    engines = await start_engines(workers)
    pool = (
        f"  - {{name: chat, endpoints: {endpoints_yaml(engines.endpoints)}, models: [{MODEL}],"
        f" max_batch: {BATCH}}}\n"
    )
    return await start_with(start_picker, "pools:\n" + pool)


async def test_a_shared_prefix_stays_on_its_worker_until_its_queue_makes_another_faster(
    start_engines: EnginesFactory, start_picker: PickerFactory
) -> None:
    picker = await _unscraped(start_engines, start_picker)
    system = system_prompt("support")  # 1000 tokens: 100 ms of prefill at the prior rate
    held = [await _pick_started(picker, chat(MODEL, "Question 0: my order is late.", system))]
    home = where(held[0])
    # Decoding requests on `home` cost a little decode pressure each; until its batch (the
    # pool's max_batch, 8) is full that is less than prefilling
    # the prompt elsewhere, then a new request would queue there and another is faster.
    on_home = 1
    for i in range(1, 3 * BATCH):
        result = await _pick_started(picker, chat(MODEL, f"Question {i}: still late.", system))
        held.append(result)
        if where(result) != home:
            break
        on_home += 1
    assert on_home == BATCH, f"{on_home} picks stayed on {home}"

    # While `home` is full, the prompt's next requests fill another worker, and so on.
    elsewhere: Counter[str] = Counter()
    for i in range(2 * BATCH):
        result = await _pick_started(picker, chat(MODEL, f"Follow-up {i}: late.", system))
        held.append(result)
        elsewhere[where(result)] += 1
    assert home not in elsewhere, elsewhere
    assert all(count <= BATCH for count in elsewhere.values()), elsewhere

    for result in held:
        await finish(picker, result)
    assert not picker.app.inflight.per_endpoint()


async def _cold(picker: RunningPicker, body: bytes) -> pb.PickResponse:
    """Pick and serve a prompt prefilled whole: 1010 tokens at 10 ms + 0.1 ms a token."""
    result = await pick_ok(picker, body)
    assert (await first_token_after(picker, result.response_id, 111)).acknowledged
    await finish(picker, result, prompt_tokens=1010, completion_tokens=5, cached_tokens=0)
    return result


async def _recorded_on(picker: RunningPicker, home: str, count: int) -> list[str]:
    """`count` new system prompts served and finished on `home`, in order, and at least one
    on the other worker, so that both have learned rates from the same reports (cold prompts
    go to their home among idle workers: distinct topics are tried until both hold)."""
    recorded: list[str] = []
    elsewhere = 0
    for i in range(64):
        system = system_prompt(f"recent-{i}")
        result = await _cold(picker, chat(MODEL, "Question 0.", system))
        if where(result) != home:
            elsewhere += 1
        elif len(recorded) < count:
            recorded.append(system)  # later ones on `home` only age `old` further
        if len(recorded) == count and elsewhere:
            return recorded
    raise AssertionError(f"64 cold prompts: {len(recorded)} on {home}, {elsewhere} elsewhere")


async def test_a_prefix_older_than_a_reported_eviction_moves(
    start_engines: EnginesFactory, start_picker: PickerFactory
) -> None:
    """A worker's report of cached 0 for a prefix the index said it held (evicted) shows
    how much it keeps (issue 13 item 3). That request prefilled the prefix again, so the
    worker holds it now and it keeps pulling requests there, all but one of its batch slots
    decoding (h101, h103); what the worker recorded before it, older than the capacity the
    report shows, is taken as evicted and is predicted cached nowhere: where it goes then is
    a cold prompt's choice (by estimated TTFT: the idle worker, unless its rates are
    unlearned and priced at the priors, which these fake engines' reports cannot settle)."""
    picker = await _unscraped(start_engines, start_picker, workers=2)
    old = system_prompt("old")
    home = where(await _cold(picker, chat(MODEL, "Question 0.", old)))
    recent = (await _recorded_on(picker, home, 2))[0]  # `old` is the oldest there now
    evicted = await _cold(picker, chat(MODEL, "Evicted.", recent))  # predicted all cached
    assert where(evicted) == home
    decoding = []
    for i in range(1, BATCH):
        result = await _pick_started(picker, chat(MODEL, f"Question {i}.", recent))
        assert where(result) == home  # prefilled again by `evicted`: held there, it stays
        decoding.append(result)
    moved = await pick_ok(picker, chat(MODEL, "Moved.", old))
    assignment = picker.app.inflight.get(moved.response_id)
    assert assignment is not None and assignment.local is not None
    assert assignment.local.cached_tokens == 0  # nothing predicted cached anywhere now
    for result in (*decoding, moved):
        await finish(picker, result)


async def test_distinct_prompts_spread_over_all_workers(
    start_engines: EnginesFactory, start_picker: PickerFactory
) -> None:
    picker = await _unscraped(start_engines, start_picker)
    picks = 120
    fair = picks / WORKERS

    # Finished one at a time: no load builds up, the tie-break alone spreads them.
    finished: Counter[str] = Counter()
    for i in range(picks):
        finished[await _pick_finished(picker, chat(MODEL, f"Request {i:04d}: what is {i}?"))] += 1
    assert len(finished) == WORKERS, finished
    assert max(finished.values()) <= 2 * fair, finished

    # Concurrent and held (a short greeting in common, below one prefix block): load spreads
    # them evenly.
    async def one(i: int) -> pb.PickResponse:
        return await pick_ok(picker, chat(MODEL, f"Hi! Request {i:04d}: tell me about {i}."))

    held: list[pb.PickResponse] = []
    for start in range(0, picks, 20):
        held += await asyncio.gather(*(one(i) for i in range(start, start + 20)))
    concurrent = Counter(where(result) for result in held)
    assert len(concurrent) == WORKERS, concurrent
    assert max(concurrent.values()) <= 2 * fair, concurrent
    assert max(concurrent.values()) - min(concurrent.values()) <= 2, concurrent


async def test_shared_short_system_prompt_under_load_still_spreads(
    start_engines: EnginesFactory, start_picker: PickerFactory
) -> None:
    """Every request shares a few prefix blocks (a short common system prompt) and stays in
    flight: affinity must not pull them all onto the first worker that saw the prefix."""
    picker = await _cluster(start_engines, start_picker)
    system = system_prompt("assistant", chars=256)
    held = [
        await pick_ok(picker, chat(MODEL, f"Request {i:04d}: " + "details " * 40, system))
        for i in range(120)
    ]
    spread = Counter(where(result) for result in held)
    assert len(spread) == WORKERS, spread
    assert max(spread.values()) <= 2 * len(held) / WORKERS, spread


@pytest.mark.parametrize("chars", [4_000, 60_000])
async def test_affinity_holds_under_light_load(
    start_engines: EnginesFactory, start_picker: PickerFactory, chars: int
) -> None:
    """A few picks of a shared prompt in flight (far below the balance threshold) stay on
    the worker that holds the prompt's prefix."""
    picker = await _cluster(start_engines, start_picker)
    system = system_prompt("legal", chars=chars)
    held = [
        await pick_ok(picker, chat(MODEL, f"Question {i}: is clause {i} valid?", system))
        for i in range(6)
    ]
    assert len({where(result) for result in held}) == 1, [where(r) for r in held]


@pytest.mark.parametrize("chars", [70_000, 200_000])
async def test_affinity_holds_under_light_load_for_a_very_long_shared_prompt(
    start_engines: EnginesFactory, start_picker: PickerFactory, chars: int
) -> None:
    await test_affinity_holds_under_light_load(start_engines, start_picker, chars)
