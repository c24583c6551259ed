"""Worker-table slots freed when their workers are gone for good (`kinference.routing.slots`):
a pool whose pods are replaced keeps a bounded table, a worker still draining keeps its slot
until its last request is released, and a reused slot starts as a new worker's."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from kinference.config import parse_policy
from kinference.ops.routing_collector import RoutingCollector
from kinference.routing import WorkerTable
from kinference.routing.features import EngineReading
from kinference.routing.pending import PendingPrefix
from kinference.routing.plugins.pick import MaxScorePicker
from tests.routing.test_router import chat, make

MODEL = "llama"


def policy(endpoints: list[str]) -> str:
    return f"pools: [{{name: chat, endpoints: {endpoints!r}, models: [{MODEL}]}}]"


def pod(n: int) -> str:
    return f"10.0.{n // 250}.{n % 250 + 1}:8000"


def test_a_pool_whose_pods_are_replaced_keeps_a_bounded_table() -> None:
    """Discovery replaces one pod of three at every reload, 60 times, a request picked and
    finished between reloads: the table holds the live workers (and none of the 57 gone),
    where it used to grow by a slot per pod ever seen."""
    live = [pod(n) for n in range(3)]
    env = make(policy(live))
    for n in range(3, 63):
        decision = env.route(chat(content=f"q {n}"))
        assert decision.local is not None
        env.inflight.add(n, decision.local, "")
        env.router.picked(decision.local)
        env.inflight.release(n)
        live = [*live[1:], pod(n)]
        env.router.reload(parse_policy(policy(live)))
    assert len(env.table) <= 4
    assert sorted(e for e in env.table.endpoints if e) == sorted(live)
    exported = {  # a freed slot's "" is no endpoint's metric
        sample.labels["endpoint"]
        for family in RoutingCollector(env.router).collect()
        for sample in family.samples
        if "endpoint" in sample.labels
    }
    assert exported == set(live)


def test_a_worker_draining_keeps_its_slot_until_its_last_request_is_released() -> None:
    """A pod leaves with a request in flight: a new pod does not take its slot (the
    request's release still finds the slot it counted on), and the next reload after
    the release frees it."""
    env = make(policy([pod(0), pod(1)]))
    env.unready(pod(1))  # the pick goes to pod 0
    decision = env.route(chat())
    assert decision.local is not None and decision.local.endpoint == pod(0)
    env.inflight.add(1, decision.local, "")
    env.router.picked(decision.local)
    draining = decision.local.slot
    env.router.reload(parse_policy(policy([pod(1), pod(2)])))
    assert env.table.find(pod(0)) == draining
    new = env.table.slot(pod(2))
    assert new != draining
    env.table.add_inflight(new, 1)  # a request of another replica on the new pod
    env.inflight.release(1)
    assert env.table.inflight[new] == 1  # the release took nothing from the new pod
    assert env.table.inflight[draining] == 0
    env.router.reload(parse_policy(policy([pod(1), pod(2)])))
    assert env.table.find(pod(0)) is None
    assert env.table.endpoints[draining] == ""


def test_a_reused_slot_starts_as_a_new_workers_and_the_others_keep_what_they_learned() -> None:
    env = make(policy([pod(0), pod(1)]))
    table, gone, kept = env.table, env.slot(pod(0)), env.slot(pod(1))
    for slot in (gone, kept):
        table.observe_ttft(slot, MODEL, 80.0)
        table.observe_itl(slot, MODEL, (0, 3, *[0] * 13))
        table.set_engine(slot, waiting=2, running=5, kv_usage=0.5, adapters=frozenset({"a"}),
                         scraped_at=env.clock())  # fmt: skip
        table.observed_batch(slot, 6.0, queued=False)
        env.router.prefix.record(slot, (11, 12, 13))
        env.router.learning.rates.observe_prefill(slot, MODEL, 1000.0, 120.0)
    env.router.reload(parse_policy(policy([pod(1), pod(2)])))
    assert table.slot(pod(2)) == gone  # reused
    assert table.endpoints[gone] == pod(2) and table.find(pod(0)) is None
    assert math.isnan(table.ttft_ms(MODEL)[gone]) and math.isnan(table.itl_ms(MODEL)[gone])
    assert math.isnan(table.waiting[gone]) and math.isnan(table.running_max[gone])
    assert math.isnan(table.batch_floor[gone]) and table.ready[gone]
    assert table.adapters[gone] == frozenset()
    mask = table.lora_mask("a")
    assert mask is not None and not mask[gone] and mask[kept]
    assert env.router.prefix.match((11, 12, 13)) == {kept: 3}
    rates = env.router.learning.rates
    assert math.isnan(rates.learned(MODEL, "prefill_ms_per_token", gone))
    assert not math.isnan(rates.learned(MODEL, "prefill_ms_per_token", kept))
    assert table.ttft_ms(MODEL)[kept] == 80.0 and table.running_max[kept] == 5


def test_a_freed_slot_is_reused_lowest_first_and_the_picker_ids_follow() -> None:
    table, picker = WorkerTable(capacity=2), MaxScorePicker()
    for n in range(4):
        table.slot(pod(n))
    before = picker.slot_ids(table.endpoints).tolist()
    for slot in (2, 0):
        table.free(slot)
    table.free(0)  # again: nothing more
    assert table.slot(pod(9)) == 0 and table.slot(pod(8)) == 2 and table.slot(pod(7)) == 4
    after = picker.slot_ids(table.endpoints).tolist()
    assert after[1] == before[1] and after[3] == before[3]
    ids = MaxScorePicker()
    assert after == [ids.slot_ids([e]).item(0) for e in table.endpoints]


def test_only_an_idle_slot_is_idle() -> None:
    table = WorkerTable()
    slot = table.slot(pod(0))
    assert table.idle(slot)
    table.add_inflight(slot, 1)
    assert not table.idle(slot)
    table.add_inflight(slot, -1)
    table.start_prefill(slot, "k", PendingPrefix((), 0, 0.0, 16.0))  # nothing to compute
    assert not table.idle(slot)
    table.end_prefill(slot, "k")
    table.start_probe(slot, "p")
    assert not table.idle(slot)
    table.end_probe("p")
    assert table.idle(slot)
    table.set_engine(slot, waiting=0, running=1, kv_usage=0.1, scraped_at=1.0)
    table.free(slot)
    assert not table.any_reading and np.isnan(table.scraped_at[slot])


@pytest.mark.parametrize("ended", ["abort", "ttl"])
def test_a_probe_released_before_its_first_token_is_no_probe_in_flight(ended: str) -> None:
    """A pick that was its pool's probe (`LocalChoice.probe`) and ended with no first
    token (an Abort, the TTL; a final report without a first one releases the same way)
    is no probe in flight any more: on main it stayed one for good, so the pool never
    probed again (`doubt.probe_limit` 0) and its worker's slot was never idle, never
    freed once the worker left."""
    env = make(policy([pod(0), pod(1)]))
    env.unready(pod(1))  # the pick goes to pod 0
    decision = env.route(chat())
    assert decision.local is not None and decision.local.endpoint == pod(0)
    probe = dataclasses.replace(decision.local, probe=True)
    env.inflight.add(1, probe, "")
    env.router.picked(probe)
    assert env.table.probing[probe.slot] == 1.0
    if ended == "abort":
        env.inflight.release(1)
    else:
        env.clock.advance(env.inflight.ttl_s + 1.0)
        assert env.inflight.expire() == [1]
    assert env.table.probing[probe.slot] == 0.0
    env.router.reload(parse_policy(policy([pod(1), pod(2)])))
    assert env.table.find(pod(0)) is None


def test_readings_of_workers_in_no_pool_take_no_slot() -> None:
    """Another replica's scrape leader sends readings of workers this replica's policy does
    not know (another pool's on the shared stream, a pod gone here already): each took a
    slot until the next reload here, and for good without one. Now they are left unread; a
    worker still draining here is read as before, and one that joins a pool is read from
    its next reading on."""
    env = make(policy([pod(0), pod(1)]))
    reading = EngineReading(waiting=3, running=2, kv_usage=0.5, scraped_at=env.clock())
    for n in range(2, 102):
        env.router.engine_reading(pod(n), True, reading)
    assert len(env.table) == 2
    env.router.reload(parse_policy(policy([pod(0), pod(2)])))
    assert env.table.find(pod(1)) is None  # idle: freed at the reload
    env.router.engine_reading(pod(2), True, reading)
    slot = env.table.find(pod(2))
    assert slot is not None and env.table.waiting[slot] == 3
