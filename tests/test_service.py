"""PickerService over a real store, router and in-flight table: every path releases once."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from prometheus_client import CollectorRegistry

from kinference.bodies import BodyStore, ByteBudget, Pull
from kinference.config import parse_policy
from kinference.errors import AlreadyConsumed, InvalidArgument, NotFound, Unavailable
from kinference.metrics import Metrics
from kinference.requests import JsonScanner
from kinference.routing import Catalog, InFlight, Outcome, PoolRef, Router
from kinference.service import FinalReport, PickCall, PickerService

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
"""
)


class CheckedBudget(ByteBudget):
    """A budget that fails the test on any release of bytes it does not hold."""

    def release(self, nbytes: int) -> None:
        assert nbytes <= self.used, f"released {nbytes} bytes while holding {self.used}"
        super().release(nbytes)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Env:
    service: PickerService
    store: BodyStore
    inflight: InFlight
    metrics: Metrics
    clock: Clock

    def metric(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0

    def push(self, data: bytes, chunk: int = 1000, *, declared: int | None = None) -> int:
        upload = self.service.begin_push(declared, "req-1")
        for i in range(0, len(data), chunk):
            upload.add(data[i : i + chunk])
        stream_id, total = self.service.commit_push(upload)
        assert total == len(data)
        return stream_id

    def pull(self, response_id: int) -> bytes:
        pull = self.service.open_pull(response_id)
        data = b"".join(bytes(m) for m in pull.messages())
        self.service.close_pull(pull, completed=True)
        return data


@pytest.fixture
def env() -> Iterator[Env]:
    clock = Clock()
    store = BodyStore(
        CheckedBudget(64 << 20),
        max_body_bytes=16 << 20,
        ttl_s=BODY_TTL,
        observer_factory=JsonScanner,
        observe_from_bytes=256 * 1024,
        clock=clock,
    )
    inflight = InFlight(REQUEST_TTL, clock=clock)
    router = Router(Catalog(POLICY), inflight, random.Random(1))
    metrics = Metrics(CollectorRegistry())
    yield Env(PickerService(store, router, inflight, metrics), store, inflight, metrics, clock)


def chat(model: str = MODEL, content: str = "hello") -> bytes:
    return json.dumps({"model": model, "messages": [{"role": "user", "content": content}]}).encode()


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
    assert result.candidate is not None
    assert result.body_total_bytes == len(data)
    assert result.requested_model == MODEL
    assert env.inflight.load(result.candidate.endpoint) == 1
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
    assert result.candidate is None
    assert '"model" must be a string' in result.reason
    assert env.store.budget.used == resident
    assert len(env.inflight) == 0
    assert env.metric("kinference_picks_total", outcome="bad_request") == 1
    with pytest.raises(AlreadyConsumed):
        env.service.pick(PickCall(stream_id))


@pytest.mark.parametrize(
    ("model", "pool", "reason"),
    [
        ("gpt-9", None, "no pool serves model 'gpt-9'"),
        ("qwen", PoolRef("default", "chat"), "does not serve model 'qwen'"),
        (MODEL, PoolRef("x", "y"), "pool x/y is not known"),
    ],
)
def test_no_workers_releases_the_body(
    env: Env, resident: int, model: str, pool: PoolRef | None, reason: str
) -> None:
    stream_id = env.push(chat(model=model))
    result = env.service.pick(PickCall(stream_id, pool=pool))
    assert result.outcome == Outcome.NO_WORKERS
    assert result.response_id == 0
    assert reason in result.reason
    assert result.requested_model == model
    assert env.store.budget.used == resident
    assert env.metric("kinference_picks_total", outcome="no_workers") == 1


def test_named_pool_is_honoured(env: Env) -> None:
    for _ in range(10):
        result = env.service.pick(PickCall(env.push(chat()), pool=PoolRef("team-b", "big")))
        assert result.candidate is not None
        assert result.candidate.endpoint == "10.0.1.5:8000"


def test_least_loaded_across_pools(env: Env) -> None:
    endpoints = []
    for _ in range(6):
        result = env.service.pick(PickCall(env.push(chat())))
        assert result.candidate is not None
        endpoints.append(result.candidate.endpoint)
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
    final = FinalReport(result.response_id, MODEL, 1, 2, 7, (), 0)
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
def test_itl_refused(env: Env, counts: tuple[int, ...], layout: int, message: str) -> None:
    result = env.service.pick(PickCall(env.push(chat())))
    with pytest.raises(InvalidArgument, match=message):
        env.service.final_token(report(result.response_id, counts, layout))


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
