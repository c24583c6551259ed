"""Reports and picks while the pools change under them (discovery churn, policy reloads)
and engine readings arrive, against the real server: a report landing after its worker
left teaches nothing of that worker (it may come back as another pod at the same address),
and a crowd of sixteen callers picking and reporting meanwhile finds every call answered,
nothing left held and nothing learned of the workers that are gone."""

from __future__ import annotations

import json
import logging
import math
import random

import pytest

from kinference.config import parse_policy
from kinference.routing.features import EngineReading
from kinference.v1 import picker_pb2 as pb
from tests.api.helpers import first_token_after, pick_ok, push_and_pick, wait_nothing_held
from tests.api.test_crowd import CROWD, outcomes, together
from tests.conftest import MODEL, PickerFactory, RunningPicker

ENDPOINTS = [f"10.0.0.{n}:8000" for n in range(1, 5)]
DOCUMENT = "A long shared document about the tides and the moon. " * 40


def policy(endpoints: list[str]) -> str:
    return f"""
pools:
  - namespace: default
    name: chat
    endpoints: {endpoints!r}
    models: ["{MODEL}"]
"""


def question(n: int) -> bytes:
    messages = [{"role": "system", "content": DOCUMENT}, {"role": "user", "content": f"q {n}"}]
    return json.dumps({"model": MODEL, "messages": messages}).encode()


def learned_of(picker: RunningPicker, endpoint: str) -> dict[str, float]:
    router = picker.app.router
    slot, rates = router.table.slot(endpoint), router.learning.rates
    return {
        "ttft": float(router.table.ttft_ms(MODEL)[slot]),
        "itl": float(router.table.itl_ms(MODEL)[slot]),
        **{q: rates.learned(MODEL, q, slot) for q in
           ("prefill_base_ms", "prefill_ms_per_token", "service_ms")},
        "capacity": float(router.prefix.capacity.get(slot, math.nan)),
    }  # fmt: skip


async def test_a_report_after_its_worker_left_teaches_nothing_of_it(
    start_picker: PickerFactory,
) -> None:
    picker = await start_picker(parse_policy(policy(ENDPOINTS)))
    first = await pick_ok(picker, question(0))
    gone = first.local.endpoint
    fresh = learned_of(picker, gone)
    assert all(math.isnan(value) for value in fresh.values()), fresh
    table = picker.app.router.table
    table.observe_ttft(table.slot(gone), MODEL, 50.0)  # as learned before it left
    table.observe_itl(table.slot(gone), MODEL, (0, 3, *[0] * 13))
    picker.app.apply_policy(parse_policy(policy([e for e in ENDPOINTS if e != gone])))
    await first_token_after(picker, first.response_id, 400)
    final = await picker.client.final_token(
        first.response_id, model=MODEL, prompt_tokens=1000, cached_tokens=0,
        itl_bucket_counts=[0, 3, *[0] * 13],
    )  # fmt: skip
    assert final.acknowledged  # the request is settled all the same
    await wait_nothing_held(picker)
    picker.app.apply_policy(parse_policy(policy(ENDPOINTS)))  # a new pod, the same address
    assert learned_of(picker, gone) == pytest.approx(fresh, nan_ok=True)


ROUNDS = 6  # requests per caller
COMING_AND_GOING = [f"10.0.1.{n}:8000" for n in range(1, 7)]  # in some policies, not the last


async def test_a_crowd_picks_and_reports_while_workers_come_and_go(
    start_picker: PickerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    picker = await start_picker(parse_policy(policy(ENDPOINTS)))
    router, rng = picker.app.router, random.Random(16)

    def churn() -> None:
        """A discovery change (some workers come, some go) and a round of readings."""
        endpoints = [*ENDPOINTS[:2], *rng.sample(COMING_AND_GOING, rng.randint(0, 4))]
        picker.app.apply_policy(parse_policy(policy(endpoints)))
        for endpoint in endpoints:
            reading = EngineReading(
                waiting=rng.randint(0, 3), running=rng.randint(0, 8), kv_usage=rng.random(),
                scraped_at=router.now(), kv_capacity_tokens=rng.choice([None, 4096.0]),
            )  # fmt: skip
            ready = endpoint in ENDPOINTS[:2] or rng.random() > 0.2  # two always are
            router.engine_reading(endpoint, ready, reading)

    async def caller(i: int) -> list[object]:
        results: list[object] = []
        for n in range(ROUNDS):
            picked = await push_and_pick(picker, question(i * ROUNDS + n))
            assert picked.outcome in (pb.PickResponse.OK, pb.PickResponse.DEGRADED), picked
            rid = picked.response_id
            churn()
            results.append(await together([picker.client.pull_all(rid)]))
            results.append(await first_token_after(picker, rid, rng.randint(1, 300)))
            churn()
            results.append(await picker.client.final_token(
                rid, model=MODEL, prompt_tokens=rng.randint(200, 800),
                cached_tokens=rng.choice([None, 0, 150, 10_000]), completion_tokens=20,
                itl_bucket_counts=[rng.randint(0, 5) for _ in range(15)],
            ))  # fmt: skip
        return results

    with caplog.at_level(logging.WARNING, logger="kinference"):
        answers = await together([caller(i) for i in range(CROWD)])
        picker.app.apply_policy(parse_policy(policy(ENDPOINTS)))
        await wait_nothing_held(picker)
    flat = [r for answer in answers for r in (answer if isinstance(answer, list) else [answer])]
    flat = [r[0] if isinstance(r, list) else r for r in flat]
    assert outcomes(flat) == {"ok": 3 * ROUNDS * CROWD}
    assert all(r.acknowledged for r in flat if isinstance(r, pb.ReportFinalTokenResponse))
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    table = router.table
    assert not table.inflight.any() and not table.pending_prefill.any()
    gone = table.slots(COMING_AND_GOING)
    assert router.prefix.footprint(gone) == [0.0] * len(COMING_AND_GOING)
    for endpoint in COMING_AND_GOING:  # gone: nothing of them is learned any more
        values = learned_of(picker, endpoint)
        assert all(math.isnan(value) for value in values.values()), (endpoint, values)
