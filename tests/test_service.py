"""PickerService over a real store, router and in-flight table: every path releases once."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from kinference.bodies import Body, BodyStore, ByteBudget, Pull
from kinference.config import parse_policy
from kinference.errors import AlreadyConsumed, InvalidArgument, NotFound, Unavailable
from kinference.metrics import Metrics
from kinference.preparation import Preparer
from kinference.requests import JsonScanner
from kinference.requests.offload import INLINE_PARSE_BYTES, Offload
from kinference.routing import (
    InFlight,
    LocalChoice,
    Outcome,
    PrefixIndex,
    ProviderChoice,
    ProviderHealth,
    QoS,
    Router,
    TenantGate,
    WorkerTable,
    compile_policy,
)
from kinference.routing.health import SERVER_ERROR, UNAUTHORIZED, UNRESOLVED
from kinference.service import FinalReport, PickCall, PickerService
from tests.clock import FakeClock

MODEL = "llama"
BODY_TTL = 60.0
REQUEST_TTL = 900.0
POLICY = parse_policy(
    f"""
pools:
  - namespace: default
    name: chat
    endpoints: ["10.0.0.5:8000", "10.0.0.6:8000"]
    models: ["{MODEL}"]
  - namespace: team-b
    name: big
    endpoints: ["10.0.1.5:8000"]
    models: ["{MODEL}", "qwen"]
providers:
  - {{namespace: ai, name: openai, api: openai}}
  - {{namespace: ai, name: azure, api: azure-openai}}
models:
  - name: small
    targets: [{{pool: default/chat, model: {MODEL}}}]
  - name: gpt
    targets:
      - {{provider: ai/openai, model: gpt-4o-mini, max_tokens_field: max_completion_tokens}}
  - name: gpt-azure
    targets: [{{provider: ai/azure, model: gpt-4o-deployment}}]
tenants:
  - {{tenant: team-a, tokens_per_minute: 20}}
"""
)
OPENAI = "ai/openai"
AZURE = "ai/azure"


class CheckedBudget(ByteBudget):
    """A budget that fails the test on any release of bytes it does not hold."""

    def release(self, nbytes: int) -> None:
        assert nbytes <= self.used, f"released {nbytes} bytes while holding {self.used}"
        super().release(nbytes)


@dataclass
class Env:
    service: PickerService
    store: BodyStore
    inflight: InFlight
    metrics: Metrics
    clock: FakeClock
    router: Router

    @property
    def table(self) -> WorkerTable:
        return self.router.table

    @property
    def health(self) -> ProviderHealth:
        return self.router.health

    def prepared_by(self, preparer: Preparer | None = None, offload: Offload | None = None) -> None:
        """A service like this one's whose Picks' bodies `preparer` tokenizes and whose
        heavy parses go to `offload` (the state they share with the old one is the same)."""
        self.service = PickerService(
            self.store, self.router, self.inflight, self.metrics,
            offload=offload, preparer=preparer,
        )  # fmt: skip

    def metric(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0

    def push(self, data: bytes, chunk: int = 1000, *, declared: int | None = None) -> int:
        upload = self.service.begin_push(declared, "req-1")
        for i in range(0, len(data), chunk):
            upload.add(data[i : i + chunk])
        stream_id, total = self.service.commit_push(upload)
        assert total == len(data)
        return stream_id

    def pick(self, data: bytes, **call: Any) -> Any:
        return self.service.pick(PickCall(self.push(data), **call))

    def pull(self, response_id: int) -> bytes:
        pull = self.service.open_pull(response_id)
        data = b"".join(bytes(m) for m in pull.messages())
        self.service.close_pull(pull, completed=True)
        return data


@pytest.fixture
def env() -> Iterator[Env]:
    clock = FakeClock(100.0)
    store = BodyStore(
        CheckedBudget(64 << 20),
        max_body_bytes=16 << 20,
        ttl_s=BODY_TTL,
        observer_factory=JsonScanner,
        observe_from_bytes=INLINE_PARSE_BYTES,  # as the server: scanned from 32 KiB
        clock=clock,
    )
    table = WorkerTable()
    compiled = compile_policy(POLICY, table)
    inflight = InFlight(table, REQUEST_TTL, clock=clock)
    router = Router(
        POLICY,
        table=table,
        prefix=PrefixIndex(POLICY.routing.prefix.lru_blocks_per_worker),
        health=ProviderHealth(compiled.cooldowns, clock=clock),
        tenants=TenantGate(clock),
        rng=random.Random(1),
        clock=clock,
    )
    metrics = Metrics(CollectorRegistry())
    service = PickerService(store, router, inflight, metrics)
    yield Env(service, store, inflight, metrics, clock, router)


def chat(model: str = MODEL, content: str = "hello", **extra: Any) -> bytes:
    doc = {"model": model, "messages": [{"role": "user", "content": content}], **extra}
    return json.dumps(doc).encode()


def report(response_id: int, counts: tuple[int, ...] = (), layout: int = 0) -> FinalReport:
    return FinalReport(response_id, MODEL, 10, 3, None, counts, layout)


@pytest.fixture
def resident(env: Env) -> int:
    """A body that stays held through the test: an over-release would eat into it."""
    env.push(chat(content="resident"))
    return env.store.budget.used


def test_full_flow(env: Env, resident: int) -> None:
    data = chat(content="x" * 10_000)
    stream_id = env.push(data, declared=len(data))
    assert env.store.budget.used == resident + len(data)
    result = env.service.pick(PickCall(stream_id, client_request_id="req-1"))
    assert result.outcome == Outcome.OK
    assert result.response_id != 0
    assert isinstance(result.destination, LocalChoice)
    assert result.body_total_bytes == len(data)
    assert result.requested_model == MODEL
    assert env.inflight.load(result.destination.endpoint) == 1
    assert env.pull(result.response_id) == data
    assert env.store.budget.used == resident
    assert env.service.first_token(result.response_id, 12, 200)
    assignment = env.inflight.get(result.response_id)
    assert assignment is not None
    assert assignment.first_token_at is not None
    assert env.service.final_token(report(result.response_id, (1,) + (0,) * 14, 1))
    assert len(env.inflight) == 0
    assert env.store.budget.used == resident
    assert env.metric("kinference_picks_total", outcome="ok") == 1
    assert env.metric("kinference_pick_duration_seconds_count") == 1
    assert env.metric("kinference_tokens_total", kind="prompt") == 10
    assert env.metric("kinference_tokens_total", kind="completion") == 3
    assert env.metric("kinference_reports_total", kind="final_token", known="true") == 1
    assert env.metric("kinference_bodies_reclaimed_total", reason="final_report") == 0


def test_large_scanned_body_flows_too(env: Env, resident: int) -> None:
    data = chat(content="QUJD" * (600 * 1024))  # 2.4 MiB: scanned while it arrives
    stream_id = env.push(data, chunk=1 << 20)
    result = env.service.pick(PickCall(stream_id))
    assert result.outcome == Outcome.OK
    assert env.pull(result.response_id) == data
    assert env.store.budget.used == resident


def test_bad_request_releases_the_body(env: Env, resident: int) -> None:
    stream_id = env.push(b'{"model": 5, "messages": []}')
    result = env.service.pick(PickCall(stream_id))
    assert result.outcome == Outcome.BAD_REQUEST
    assert result.response_id == 0
    assert result.destination is None
    assert '"model" must be a string' in result.reason
    assert env.store.budget.used == resident
    assert len(env.inflight) == 0
    assert env.metric("kinference_picks_total", outcome="bad_request") == 1
    with pytest.raises(AlreadyConsumed):
        env.service.pick(PickCall(stream_id))


@pytest.mark.parametrize(
    ("model", "pool", "reason"),
    [
        ("gpt-9", None, "no pool or provider serves model 'gpt-9'"),
        ("qwen", "default/chat", "the named pool default/chat does not serve 'qwen'"),
        (MODEL, "x/y", "pool x/y is not known"),
    ],
)
def test_no_workers_releases_the_body(
    env: Env, resident: int, model: str, pool: str | None, reason: str
) -> None:
    stream_id = env.push(chat(model=model))
    result = env.service.pick(PickCall(stream_id, pool=pool))
    assert result.outcome == Outcome.NO_WORKERS
    assert result.response_id == 0
    assert result.destination is None
    assert result.reason == reason
    assert result.requested_model == model
    assert env.store.budget.used == resident
    assert env.metric("kinference_picks_total", outcome="no_workers") == 1


def test_named_pool_is_honoured(env: Env) -> None:
    for _ in range(10):
        result = env.service.pick(PickCall(env.push(chat()), pool="team-b/big"))
        assert isinstance(result.destination, LocalChoice)
        assert result.destination.endpoint == "10.0.1.5:8000"
        assert result.destination.pool == "team-b/big"


def test_least_loaded_across_pools(env: Env) -> None:
    endpoints = []
    for _ in range(6):
        result = env.service.pick(PickCall(env.push(chat())))
        assert isinstance(result.destination, LocalChoice)
        endpoints.append(result.destination.endpoint)
    assert sorted(endpoints) == sorted(["10.0.0.5:8000", "10.0.0.6:8000", "10.0.1.5:8000"] * 2)


def test_pick_protocol_errors(env: Env, resident: int) -> None:
    with pytest.raises(InvalidArgument):
        env.service.pick(PickCall(0))
    with pytest.raises(NotFound):
        env.service.pick(PickCall(424242))
    assert env.store.budget.used == resident


def test_pick_that_fails_unexpectedly_still_releases(
    env: Env, resident: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream_id = env.push(chat())

    def boom(query: object) -> None:
        raise RuntimeError("router bug")

    monkeypatch.setattr(env.service.router, "route", boom)
    with pytest.raises(RuntimeError):
        env.service.pick(PickCall(stream_id))
    assert env.store.budget.used == resident
    assert len(env.inflight) == 0


def test_abort_before_pull(env: Env, resident: int) -> None:
    result = env.service.pick(PickCall(env.push(chat())))
    env.service.abort(result.response_id, "NOT_DISPATCHED", "client went away")
    assert env.store.budget.used == resident
    assert len(env.inflight) == 0
    assert env.metric("kinference_bodies_reclaimed_total", reason="abort") == 1
    with pytest.raises(NotFound):  # again: already released
        env.service.abort(result.response_id, "NOT_DISPATCHED", "")
    with pytest.raises(NotFound):
        env.service.open_pull(result.response_id)


def test_abort_during_pull(env: Env, resident: int) -> None:
    data = chat(content="y" * 300_000)
    result = env.service.pick(PickCall(env.push(data)))
    pull = env.service.open_pull(result.response_id)
    messages = pull.messages()
    first = next(messages)
    env.service.abort(result.response_id, "PULL_FAILED", "")  # frees the slot, not the pull
    assert len(env.inflight) == 0
    assert env.metric("kinference_bodies_reclaimed_total", reason="abort") == 0
    rest = b"".join(bytes(m) for m in messages)
    assert bytes(first) + rest == data
    env.service.close_pull(pull, completed=True)
    assert env.store.budget.used == resident
    with pytest.raises(NotFound):
        env.service.abort(result.response_id, "PULL_FAILED", "")


def test_abort_after_final_report_is_not_found(env: Env) -> None:
    result = env.service.pick(PickCall(env.push(chat())))
    env.pull(result.response_id)
    assert env.service.final_token(report(result.response_id))
    with pytest.raises(NotFound):
        env.service.abort(result.response_id, "REASON_UNSPECIFIED", "")


@pytest.mark.parametrize("response_id", [0, 1, 2**64 - 1])
def test_abort_unknown_is_not_found(env: Env, response_id: int) -> None:
    with pytest.raises(NotFound):
        env.service.abort(response_id, "NOT_DISPATCHED", "")


def test_abandoned_pull_releases_at_once(env: Env, resident: int) -> None:
    data = chat(content="z" * 500_000)
    result = env.service.pick(PickCall(env.push(data)))
    pull: Pull = env.service.open_pull(result.response_id)
    next(pull.messages())
    env.service.close_pull(pull, completed=False)
    assert env.store.budget.used == resident
    assert env.metric("kinference_bodies_reclaimed_total", reason="pull_abandoned") == 1
    assert len(env.inflight) == 1  # the request may still be answered upstream
    with pytest.raises(NotFound):
        env.service.open_pull(result.response_id)


def test_final_report_without_pull_drops_the_body(env: Env, resident: int) -> None:
    result = env.service.pick(PickCall(env.push(chat())))
    assert env.service.final_token(report(result.response_id))
    assert env.store.budget.used == resident
    assert env.metric("kinference_bodies_reclaimed_total", reason="final_report") == 1
    assert not env.service.final_token(report(result.response_id))
    assert env.metric("kinference_reports_total", kind="final_token", known="false") == 1


def test_cached_tokens_counted_when_present(env: Env) -> None:
    result = env.service.pick(PickCall(env.push(chat())))
    env.pull(result.response_id)
    final = FinalReport(result.response_id, MODEL, 10, 2, 7, (), 0)
    assert env.service.final_token(final)
    assert env.metric("kinference_tokens_total", kind="cached") == 7


def test_unknown_reports_are_not_acknowledged(env: Env) -> None:
    assert not env.service.first_token(99, 1, 200)
    assert not env.service.final_token(report(99))
    assert env.metric("kinference_reports_total", kind="first_token", known="false") == 1


@pytest.mark.parametrize(
    ("counts", "layout"),
    [
        ((0,) * 15, 1),
        ((), 0),
        ((), 1),
        ((), 7),  # no gaps: the layout does not matter
    ],
)
def test_itl_accepted(env: Env, counts: tuple[int, ...], layout: int) -> None:
    result = env.service.pick(PickCall(env.push(chat())))
    assert env.service.final_token(report(result.response_id, counts, layout))


@pytest.mark.parametrize(
    ("counts", "layout", "message"),
    [
        ((1,) * 15, 0, "unknown itl_bucket_layout 0"),
        ((1,) * 15, 2, "unknown itl_bucket_layout 2"),
        ((1,) * 14, 1, "has 14 entries"),
        ((1,) * 16, 1, "has 16 entries"),
    ],
)
def test_itl_refused(
    env: Env, resident: int, counts: tuple[int, ...], layout: int, message: str
) -> None:
    """Refused, the report counts and teaches nothing, but its request is over: its load,
    body and reservation are released now, not at the request's TTL (~900 s)."""
    result = env.service.pick(PickCall(env.push(chat())))
    with pytest.raises(InvalidArgument, match=message):
        env.service.final_token(report(result.response_id, counts, layout))
    assert len(env.inflight) == 0
    assert sum(env.inflight.table.inflight) == 0
    assert env.store.budget.used == resident
    assert env.metric("kinference_tokens_total", kind="completion") == 0
    assert not env.service.final_token(report(result.response_id))


def test_ttl_reclaims_unpicked_bodies(env: Env) -> None:
    stream_id = env.push(chat())
    env.clock.now += BODY_TTL
    env.service.reap()
    assert env.store.budget.used == 0
    assert env.metric("kinference_bodies_reclaimed_total", reason="ttl_unpicked") == 1
    with pytest.raises(NotFound):
        env.service.pick(PickCall(stream_id))


def test_ttl_reclaims_unpulled_bodies_and_their_slot(env: Env) -> None:
    result = env.service.pick(PickCall(env.push(chat())))
    env.clock.now += BODY_TTL - 1
    env.service.reap()
    assert len(env.inflight) == 1
    env.clock.now += 1
    env.service.reap()
    assert env.store.budget.used == 0
    assert len(env.inflight) == 0
    assert env.metric("kinference_bodies_reclaimed_total", reason="ttl_unpulled") == 1
    with pytest.raises(NotFound):
        env.service.open_pull(result.response_id)
    with pytest.raises(NotFound):
        env.service.abort(result.response_id, "NOT_DISPATCHED", "")


def test_request_ttl_drops_load_of_silent_requests(env: Env) -> None:
    result = env.service.pick(PickCall(env.push(chat())))
    env.pull(result.response_id)
    env.clock.now += REQUEST_TTL - 1
    env.service.reap()
    assert len(env.inflight) == 1
    env.clock.now += 1
    env.service.reap()
    assert len(env.inflight) == 0
    assert not env.service.final_token(report(result.response_id))


def test_discarded_push_leaves_nothing(env: Env, resident: int) -> None:
    upload = env.service.begin_push(100, "r")
    upload.add(b"{" * 50)
    env.service.discard_push(upload)
    assert env.store.budget.used == resident
    upload = env.service.begin_push(100, "r")
    upload.add(b"{" * 50)
    with pytest.raises(InvalidArgument):
        env.service.commit_push(upload)  # 50 of 100 declared bytes
    env.service.discard_push(upload)
    assert env.store.budget.used == resident
    assert env.store.held_bodies == 1


def test_draining_refuses_pushes_but_finishes_requests(env: Env) -> None:
    stream_id = env.push(chat())
    env.store.draining = True
    with pytest.raises(Unavailable):
        env.service.begin_push(None, "")
    result = env.service.pick(PickCall(stream_id))
    assert not env.store.idle
    assert env.pull(result.response_id) == chat()
    assert env.store.idle


def test_many_interleaved_requests_release_everything(env: Env, resident: int) -> None:
    rng = random.Random(3)
    live: list[tuple[str, int]] = [("pushed", env.push(chat(content=str(i)))) for i in range(60)]
    while live:
        state, ident = live.pop(rng.randrange(len(live)))
        if state == "pushed":
            result = env.service.pick(PickCall(ident))
            live.append(("picked", result.response_id))
        elif state == "picked":
            action = rng.choice(["pull", "abort", "final"])
            if action == "pull":
                env.pull(ident)
                live.append(("pulled", ident))
            elif action == "abort":
                env.service.abort(ident, "NOT_DISPATCHED", "")
            else:
                assert env.service.final_token(report(ident))
        else:
            assert env.service.final_token(report(ident))
    assert env.store.budget.used == resident
    assert len(env.inflight) == 0
    assert env.store.held_bodies == 1


# --- rewrite --------------------------------------------------------------------------------


def test_rewrite_serves_the_target_model(env: Env, resident: int) -> None:
    data = chat("small", content="rewrite me")
    result = env.pick(data)
    assert result.outcome == Outcome.OK
    assert isinstance(result.destination, LocalChoice)
    assert result.destination.model == MODEL
    assert result.destination.endpoint in ("10.0.0.5:8000", "10.0.0.6:8000")
    assert result.requested_model == "small"  # what the client asked for
    assert env.store.budget.used == resident + result.body_total_bytes  # the rewritten size
    pulled = env.pull(result.response_id)
    assert result.body_total_bytes == len(pulled)
    assert pulled.startswith(b'{"model":"llama",')  # the value span, from the colon
    assert json.loads(pulled) == {**json.loads(data), "model": MODEL}
    assert env.store.budget.used == resident


def test_streams_get_usage(env: Env, resident: int) -> None:
    data = chat(stream=True)
    result = env.pick(data)
    pulled = env.pull(result.response_id)
    assert result.body_total_bytes == len(pulled) > len(data)
    doc = json.loads(pulled)
    assert doc["stream_options"] == {"include_usage": True}
    assert doc["model"] == MODEL
    assert env.store.budget.used == resident


def test_provider_rewrite_and_path(env: Env, resident: int) -> None:
    data = chat("gpt", max_tokens=7, kinference={"hint": "any"})
    result = env.pick(data)
    assert result.outcome == Outcome.OK
    assert result.destination == ProviderChoice(OPENAI, "/v1/chat/completions", "gpt-4o-mini")
    assert result.requested_model == "gpt"
    assert len(env.inflight) == 1
    assert env.inflight.per_endpoint() == {}  # no worker carries a provider's request
    doc = json.loads(env.pull(result.response_id))
    assert doc["model"] == "gpt-4o-mini"
    assert doc["max_completion_tokens"] == 7
    assert "max_tokens" not in doc
    assert "kinference" not in doc  # our hint is never forwarded
    assert env.store.budget.used == resident


def test_azure_path(env: Env) -> None:
    result = env.pick(chat("gpt-azure"))
    assert isinstance(result.destination, ProviderChoice)
    assert result.destination.ref == AZURE
    assert result.destination.path == (
        "/openai/deployments/gpt-4o-deployment/chat/completions?api-version=2024-10-21"
    )


def test_untouched_body_is_the_same_object(
    env: Env, resident: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken: list[Body] = []
    parked: list[Body] = []
    take, park = env.store.take, env.store.park

    def spy_take(stream_id: int) -> Body:
        taken.append(take(stream_id))
        return taken[-1]

    def spy_park(response_id: int, body: Body) -> None:
        parked.append(body)
        park(response_id, body)

    monkeypatch.setattr(env.store, "take", spy_take)
    monkeypatch.setattr(env.store, "park", spy_park)
    data = chat(content="as is")
    result = env.pick(data)
    assert parked[0] is taken[0]
    assert result.body_total_bytes == len(data)
    assert env.pull(result.response_id) == data
    env.pick(chat("small"))  # rewritten: a new body sharing the untouched bytes
    assert parked[1] is not taken[1]
    assert env.store.budget.used == resident + parked[1].size


def test_large_scanned_body_is_rewritten_too(env: Env, resident: int) -> None:
    data = chat("small", content="QUJD" * (600 * 1024), stream=True)
    result = env.service.pick(PickCall(env.push(data, chunk=1 << 20)))
    assert result.outcome == Outcome.OK
    pulled = env.pull(result.response_id)
    assert len(pulled) == result.body_total_bytes
    doc = json.loads(pulled)
    assert doc["model"] == MODEL
    assert doc["stream_options"] == {"include_usage": True}
    assert doc["messages"] == json.loads(data)["messages"]
    assert env.store.budget.used == resident


# --- reports feed the routing state ---------------------------------------------------------


def test_tenant_budget_reserved_at_pick_settled_by_the_report(env: Env, resident: int) -> None:
    first = env.pick(chat(), tenant="team-a")
    assert first.outcome == Outcome.OK
    reserved = env.router.tenants.used("team-a")
    assert reserved > 20  # the prompt estimate plus the (not yet learned) output: all 20
    held = env.pick(chat(), tenant="team-a")  # the reservation is seen before any report
    assert held.outcome == Outcome.POLICY_REJECTED
    assert held.reason == (
        f"tenant 'team-a' used its budget: {reserved} of 20 tokens in the last minute"
    )
    env.pull(first.response_id)
    assert env.service.final_token(report(first.response_id))  # 10 + 3 tokens
    assert env.router.tenants.used("team-a") == 13  # settled to what was reported
    aborted = env.pick(chat(), tenant="team-a")
    assert aborted.outcome == Outcome.OK  # 13 of 20: still admitted
    env.service.abort(aborted.response_id, "NOT_DISPATCHED", "")
    assert env.router.tenants.used("team-a") == 13  # handed back
    second = env.pick(chat(), tenant="team-a")
    assert env.service.final_token(FinalReport(second.response_id, MODEL, 5, 5, None, (), 0))
    rejected = env.pick(chat(), tenant="team-a")
    assert rejected.outcome == Outcome.POLICY_REJECTED
    assert rejected.response_id == 0
    assert rejected.reason == (
        "tenant 'team-a' used its budget: 23 of 20 tokens in the last minute"
    )
    assert rejected.requested_model == MODEL
    assert env.metric("kinference_picks_total", outcome="policy_rejected") == 2
    assert env.pick(chat(), tenant="team-b").outcome == Outcome.OK  # no rule: allowed
    assert env.pick(chat(), tenant="").outcome == Outcome.OK
    env.clock.now += 61
    assert env.pick(chat(), tenant="team-a").outcome == Outcome.OK
    assert env.store.budget.used == resident + 3 * len(chat())  # the three not pulled


def test_a_reservation_expires_with_its_request(env: Env) -> None:
    picked = env.pick(chat(), tenant="team-a")
    assert env.router.tenants.used("team-a") > 0
    env.pull(picked.response_id)
    env.clock.now += env.inflight.ttl_s + 1
    env.service.reap()  # the caller never reported: the request and its tokens go
    assert picked.response_id not in env.inflight
    assert env.router.tenants.used("team-a") == 0


def test_unknown_final_report_counts_no_tokens(env: Env) -> None:
    result = env.pick(chat(), tenant="team-a")
    assert env.service.final_token(report(result.response_id))
    assert not env.service.final_token(report(result.response_id))  # again
    assert env.router.tenants.used("team-a") == 13


def test_ttft_feeds_the_latency_estimate(env: Env) -> None:
    result = env.pick(chat())
    destination = result.destination
    assert isinstance(destination, LocalChoice)
    env.clock.now += 0.12  # the first token comes 120 ms after the Pick
    assert env.service.first_token(result.response_id, 120, 200)
    assert env.table.ttft_ms(MODEL)[destination.slot] == 120
    other = env.pick(chat(), pool=destination.pool)
    assert isinstance(other.destination, LocalChoice)
    assert env.service.first_token(other.response_id, 999, 503)  # an error: not a latency
    if other.destination.slot == destination.slot:
        assert env.table.ttft_ms(MODEL)[destination.slot] == 120
    else:
        assert np.isnan(env.table.ttft_ms(MODEL)[other.destination.slot])
    assert env.health.active() == {}  # a local worker's error cools no provider


def test_itl_feeds_the_estimate(env: Env) -> None:
    result = env.pick(chat())
    assert isinstance(result.destination, LocalChoice)
    assert env.service.final_token(report(result.response_id, (2,) + (0,) * 14, 1))
    assert env.table.itl_ms(MODEL)[result.destination.slot] == 2.5


def test_latency_steers_later_picks(env: Env) -> None:
    slow = env.pick(chat(), pool="team-b/big")
    env.clock.now += 3.0
    assert env.service.first_token(slow.response_id, 3000, 200)
    assert env.service.final_token(report(slow.response_id))
    fast = env.pick(chat(), pool="default/chat")
    assert isinstance(fast.destination, LocalChoice)
    assert env.service.first_token(fast.response_id, 20, 200)
    assert env.service.final_token(report(fast.response_id))
    for _ in range(20):
        result = env.pick(chat())
        assert isinstance(result.destination, LocalChoice)
        assert result.destination.endpoint != "10.0.1.5:8000"
        env.service.abort(result.response_id, "NOT_DISPATCHED", "")


def test_prefix_is_recorded_at_dispatch(env: Env) -> None:
    prompt = " ".join(f"token{i}" for i in range(300))
    first = env.pick(chat(content=prompt))
    assert isinstance(first.destination, LocalChoice)
    assert first.destination.prefix_total > 0
    assert first.destination.prefix_blocks == 0
    assert len(env.router.prefix) == first.destination.prefix_total
    # Once its prefill is done (first token), the cached prefix outweighs the one request
    # still decoding there: the estimated TTFT is lower where the prompt is cached.
    assert env.service.first_token(first.response_id, 50, 200)
    for _ in range(5):
        again = env.pick(chat(content=prompt))
        assert isinstance(again.destination, LocalChoice)
        assert again.destination.endpoint == first.destination.endpoint
        assert again.destination.prefix_blocks == again.destination.prefix_total
        env.service.abort(again.response_id, "NOT_DISPATCHED", "")


def test_degraded_dispatches(env: Env, resident: int) -> None:
    data = json.dumps(
        {"model": MODEL, "input": [{"role": "user", "content": "hi"}], "previous_response_id": "r"}
    ).encode()
    result = env.pick(data)
    assert result.outcome == Outcome.DEGRADED
    assert result.response_id != 0
    assert isinstance(result.destination, LocalChoice)
    assert "no full prefix-cache signal" in result.reason
    assert env.pull(result.response_id) == data
    assert env.service.final_token(report(result.response_id))
    assert env.store.budget.used == resident
    assert env.metric("kinference_picks_total", outcome="degraded") == 1


def test_saturation_shedding_releases_the_body(env: Env, resident: int) -> None:
    for endpoint in ("10.0.0.5:8000", "10.0.0.6:8000", "10.0.1.5:8000"):
        env.table.set_engine(
            env.table.slot(endpoint), waiting=10, running=4, kv_usage=0.5, scraped_at=env.clock()
        )
    for qos in (QoS.DEFERRABLE, QoS.BATCH):
        result = env.pick(chat(), qos=qos)
        assert result.outcome == Outcome.POLICY_REJECTED
        assert "saturated" in result.reason
    result = env.pick(chat(), qos=QoS.INTERACTIVE)
    assert result.outcome == Outcome.OK  # never shed
    env.service.abort(result.response_id, "NOT_DISPATCHED", "")
    assert env.store.budget.used == resident
    assert len(env.inflight) == 0


def test_stale_saturation_sheds_nothing(env: Env, resident: int) -> None:
    """Readings older than engine_metrics.stale_after_s are unknown, so not saturated."""
    stale_after = env.router.policy.engine_stale_after_s
    for endpoint in ("10.0.0.5:8000", "10.0.0.6:8000", "10.0.1.5:8000"):
        env.table.set_engine(
            env.table.slot(endpoint), waiting=10, running=4, kv_usage=0.5, scraped_at=env.clock()
        )
    env.clock.now += stale_after + 0.01
    for qos in (QoS.DEFERRABLE, QoS.BATCH):
        result = env.pick(chat(), qos=qos)
        assert result.outcome == Outcome.OK, result.reason
        assert isinstance(result.destination, LocalChoice)
        env.service.abort(result.response_id, "NOT_DISPATCHED", "")
    assert env.store.budget.used == resident
    assert len(env.inflight) == 0


# --- provider health ------------------------------------------------------------------------


@pytest.mark.parametrize("status", [401, 403])
def test_provider_unauthorized_upstream_cools_it(env: Env, resident: int, status: int) -> None:
    result = env.pick(chat("gpt"))
    assert isinstance(result.destination, ProviderChoice)
    assert env.service.first_token(result.response_id, 40, status)
    cooldown = env.health.cooled(OPENAI)
    assert cooldown is not None
    assert cooldown.reason == UNAUTHORIZED
    assert cooldown.detail == f"upstream status {status}"
    rejected = env.pick(chat("gpt"))
    assert rejected.outcome == Outcome.NO_WORKERS
    assert rejected.reason == (
        "provider ai/openai is cooling down (backend_unauthorized, 300s left)"
    )
    assert env.service.final_token(report(result.response_id))
    assert env.store.budget.used == resident
    env.clock.now += 300
    assert env.pick(chat("gpt")).outcome == Outcome.OK


def test_provider_server_errors_cool_past_the_threshold(env: Env) -> None:
    for count in range(3):
        result = env.pick(chat("gpt"))
        assert result.outcome == Outcome.OK, count
        assert env.service.first_token(result.response_id, 40, 502)
    cooldown = env.health.cooled(OPENAI)
    assert cooldown is not None
    assert cooldown.reason == SERVER_ERROR
    assert env.health.cooled(AZURE) is None


def test_provider_ttft_is_not_a_worker_latency(env: Env) -> None:
    result = env.pick(chat("gpt"))
    assert env.service.first_token(result.response_id, 40, 200)
    assert np.isnan(env.table.ttft_ms("gpt-4o-mini")[: len(env.table)]).all()
    assert env.health.active() == {}


def test_abort_unauthorized_after_release_still_cools(env: Env, resident: int) -> None:
    result = env.pick(chat("gpt"))
    env.pull(result.response_id)
    assert env.service.final_token(report(result.response_id))
    assert env.health.cooled(OPENAI) is None
    with pytest.raises(NotFound):
        env.service.abort(result.response_id, "BACKEND_UNAUTHORIZED", "401 from upstream")
    cooldown = env.health.cooled(OPENAI)
    assert cooldown is not None
    assert (cooldown.reason, cooldown.detail) == (UNAUTHORIZED, "401 from upstream")
    assert env.store.budget.used == resident
    assert env.pick(chat("gpt")).outcome == Outcome.NO_WORKERS


def test_abort_unresolved_in_flight_cools_and_releases(env: Env, resident: int) -> None:
    result = env.pick(chat("gpt-azure"))
    env.service.abort(result.response_id, "BACKEND_UNRESOLVED", "no such GatewayBackend")
    cooldown = env.health.cooled(AZURE)
    assert cooldown is not None
    assert cooldown.reason == UNRESOLVED
    assert env.health.cooled(OPENAI) is None
    assert len(env.inflight) == 0
    assert env.store.budget.used == resident
    assert env.metric("kinference_bodies_reclaimed_total", reason="abort") == 1
    with pytest.raises(NotFound):
        env.service.abort(result.response_id, "BACKEND_UNRESOLVED", "")


def test_abort_after_ttl_still_cools(env: Env, resident: int) -> None:
    result = env.pick(chat("gpt"))
    env.clock.now += BODY_TTL
    env.service.reap()  # body and in-flight entry reclaimed
    assert len(env.inflight) == 0
    with pytest.raises(NotFound):
        env.service.abort(result.response_id, "BACKEND_UNAUTHORIZED", "")
    assert env.health.cooled(OPENAI) is not None
    assert env.store.budget.used == 0


@pytest.mark.parametrize("reason", ["BACKEND_UNAUTHORIZED", "BACKEND_UNRESOLVED"])
def test_a_repeated_abort_counts_once(env: Env, resident: int, reason: str) -> None:
    first, second = env.pick(chat("gpt")), env.pick(chat("gpt"))
    env.service.abort(first.response_id, reason, "first")
    for _ in range(3):  # the caller retries its Abort: the same failed request
        with pytest.raises(NotFound):
            env.service.abort(first.response_id, reason, "again")
    cooldown = env.health.cooled(OPENAI)
    assert cooldown is not None
    assert (cooldown.count, cooldown.detail) == (1, "first")
    env.service.abort(second.response_id, reason, "second")  # another request: counts
    assert cooldown.count == 2
    with pytest.raises(NotFound):
        env.service.abort(second.response_id, reason, "again")
    assert cooldown.count == 2
    assert env.health.cooled(OPENAI) is cooldown
    assert len(env.inflight) == 0
    assert env.store.budget.used == resident


def test_a_repeated_abort_does_not_renew_an_ended_cooldown(env: Env) -> None:
    result = env.pick(chat("gpt"))
    env.service.abort(result.response_id, "BACKEND_UNAUTHORIZED", "401")
    cooldown = env.health.cooled(OPENAI)
    assert cooldown is not None
    env.clock.now = cooldown.until
    assert env.health.cooled(OPENAI) is None
    with pytest.raises(NotFound):
        env.service.abort(result.response_id, "BACKEND_UNAUTHORIZED", "401")
    assert env.health.cooled(OPENAI) is None
    assert env.pick(chat("gpt")).outcome == Outcome.OK


def test_a_repeated_abort_with_another_reason_counts_once(env: Env) -> None:
    result = env.pick(chat("gpt"))
    env.service.abort(result.response_id, "BACKEND_UNRESOLVED", "dns")
    with pytest.raises(NotFound):
        env.service.abort(result.response_id, "BACKEND_UNAUTHORIZED", "401")
    cooldown = env.health.cooled(OPENAI)
    assert cooldown is not None
    assert (cooldown.reason, cooldown.count) == (UNRESOLVED, 1)


@pytest.mark.parametrize("reason", ["NOT_DISPATCHED", "PULL_FAILED", "REASON_UNSPECIFIED"])
def test_other_aborts_do_not_cool(env: Env, reason: str) -> None:
    result = env.pick(chat("gpt"))
    env.service.abort(result.response_id, reason, "")
    assert env.health.active() == {}


def test_backend_aborts_on_a_local_worker_cool_nothing(env: Env) -> None:
    result = env.pick(chat())
    env.service.abort(result.response_id, "BACKEND_UNAUTHORIZED", "")
    assert env.health.active() == {}


def test_abort_of_an_unknown_id_cools_nothing(env: Env) -> None:
    with pytest.raises(NotFound):
        env.service.abort(12345, "BACKEND_UNAUTHORIZED", "")
    assert env.health.active() == {}


def test_mixed_interleaving_releases_everything_once(env: Env, resident: int) -> None:
    """Local and provider picks, rewritten and untouched bodies, every end a request can
    have; the checked budget fails on any release of bytes not held."""
    rng = random.Random(11)
    models = [MODEL, "small", "gpt", "gpt-azure", "gpt-9", "qwen"]
    live: list[tuple[str, int]] = []
    for i in range(80):
        extra: dict[str, Any] = {"stream": True} if rng.random() < 0.5 else {}
        if rng.random() < 0.3:
            extra["max_tokens"] = 5
        data = chat(rng.choice(models), content=f"request {i} " * rng.randint(1, 50), **extra)
        live.append(("pushed", env.push(data, chunk=rng.choice([7, 100, 1000]))))
    while live:
        state, ident = live.pop(rng.randrange(len(live)))
        if state == "pushed":
            qos = rng.choice(list(QoS))
            result = env.service.pick(PickCall(ident, qos=qos))
            if result.response_id:
                live.append(("picked", result.response_id))
        elif state == "picked":
            action = rng.choice(["pull", "abort", "final", "unauthorized"])
            if action == "pull":
                pulled = env.pull(ident)
                json.loads(pulled)
                live.append(("pulled", ident))
            elif action == "abort":
                env.service.abort(ident, "NOT_DISPATCHED", "")
            elif action == "unauthorized":
                env.service.abort(ident, "BACKEND_UNAUTHORIZED", "")
            else:
                assert env.service.final_token(report(ident))
        else:
            env.service.first_token(ident, 10, rng.choice([200, 200, 500]))
            assert env.service.final_token(report(ident))
    assert env.store.budget.used == resident
    assert len(env.inflight) == 0
    assert env.store.held_bodies == 1
    assert env.inflight.per_endpoint() == {}


async def test_the_prefix_index_records_the_pick_once_its_answer_is_out(env: Env) -> None:
    prompt = " ".join(f"token{i}" for i in range(300))
    result = await env.service.pick_off_loop(PickCall(env.push(chat(content=prompt))))
    assert isinstance(result.destination, LocalChoice)
    waiting = env.router.prefix._later  # applied in the loop's next step, not in the Pick's
    assert [hashes for _, hashes in waiting] == [result.destination.hashes]
    await asyncio.sleep(0)
    assert not env.router.prefix._later
    assert len(env.router.prefix) == result.destination.prefix_total


async def _drained() -> None:
    """Once every callback queued on the loop before this call has run (FIFO)."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.call_soon(done.set_result, None)
    await done


async def test_an_async_picks_metrics_are_counted_once_its_answer_is_out(env: Env) -> None:
    result = await env.service.pick_off_loop(PickCall(env.push(chat()), client_request_id="a"))
    assert result.outcome == Outcome.OK
    # Not in the Pick's own step: its three metric updates are not on the request's way.
    assert env.metric("kinference_picks_total", outcome="ok") == 0
    assert env.metric("kinference_pick_duration_seconds_count") == 0
    await _drained()  # the step after the answer
    assert env.metric("kinference_picks_total", outcome="ok") == 1
    assert env.metric("kinference_pick_reasons_total", outcome="ok", reason="none") == 1
    assert env.metric("kinference_pick_duration_seconds_count") == 1
    assert 0 < env.metric("kinference_pick_duration_seconds_sum") < 5


async def test_settle_counts_the_answered_picks_at_once_in_order(env: Env) -> None:
    first = await env.service.pick_off_loop(PickCall(env.push(chat())))
    second = await env.service.pick_off_loop(PickCall(env.push(chat(model="nope"))))
    assert (first.outcome, second.outcome) == (Outcome.OK, Outcome.NO_WORKERS)
    env.service.settle()
    assert env.metric("kinference_picks_total", outcome="ok") == 1
    assert env.metric("kinference_picks_total", outcome="no_workers") == 1
    assert env.metric("kinference_pick_duration_seconds_count") == 2
    env.service.settle()  # nothing left: counted once
    await _drained()
    assert env.metric("kinference_pick_duration_seconds_count") == 2
    assert not env.router.prefix._later


def test_the_ttft_histogram_counts_a_request_once_and_no_impossible_ttft(env: Env) -> None:
    """Before: each repeated ReportFirstToken of one request was observed again (a caller
    retrying its report skewed the distribution), and a TTFT longer than the time since
    the Pick (4294967295 ms: a caller's clock gone back) went into the sum as it came."""
    result = env.pick(chat())
    env.clock.now += 0.05
    for _ in range(4):
        assert env.service.first_token(result.response_id, 2**32 - 1, 200)
    labels = {"destination": "local"}
    assert env.metric("kinference_ttft_seconds_count", **labels) == 1
    assert env.metric("kinference_ttft_seconds_sum", **labels) <= 0.05 + 0.001


def test_cached_tokens_past_the_prompt_count_as_the_prompt(env: Env) -> None:
    """Before: `kinference_tokens_total{kind="cached"}` took a report's cached tokens as
    they came, past its prompt (a hit ratio over 1 on dashboards)."""
    result = env.pick(chat())
    assert env.service.final_token(FinalReport(result.response_id, MODEL, 10, 3, 2**32 - 1, (), 0))
    assert env.metric("kinference_tokens_total", kind="cached") == 10
