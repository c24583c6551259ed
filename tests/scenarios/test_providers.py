"""Provider cool-downs learned from Aborts and upstream statuses, and clearing them."""

from __future__ import annotations

import time

import grpc
import pytest

from kinference.v1 import picker_pb2 as pb
from tests.api.helpers import wait_until
from tests.conftest import PickerFactory, RunningPicker
from tests.scenarios.helpers import NO_WORKERS, OK, chat, pick, start_with, where

MODEL = "gpt"
PRIMARY, BACKUP = "ai/openai", "ai/backup"
TO_PRIMARY = "provider:ai/openai/v1/chat/completions"
TO_BACKUP = "provider:ai/backup/v1/chat/completions"
RATE_LIMITED_S = 1.0

POLICY = f"""
providers:
  - {{namespace: ai, name: openai, api: openai}}
  - {{namespace: ai, name: backup, api: openai}}
models:
  - name: {MODEL}
    targets:
      - {{provider: {PRIMARY}, model: gpt-4o}}
      - {{provider: {BACKUP}, model: gpt-4o-backup}}
provider_health:
  cooldown_s: {{rate_limited: {RATE_LIMITED_S}, backend_unauthorized: 300, backend_unresolved: 60}}
  server_error_threshold: 3
  server_error_window_s: 30
"""


async def _picker(start_picker: PickerFactory) -> RunningPicker:
    return await start_with(start_picker, POLICY)


async def _pick(picker: RunningPicker, text: str = "hi") -> pb.PickResponse:
    return await pick(picker, chat(MODEL, text))


async def _abort(picker: RunningPicker, response_id: int, reason: int, detail: str) -> None:
    """Abort; an id already released may answer NOT_FOUND, which the caller tolerates."""
    try:
        await picker.client.abort(response_id, reason, detail)
    except grpc.aio.AioRpcError as error:
        assert error.code() == grpc.StatusCode.NOT_FOUND, error


def _remaining(picker: RunningPicker, ref: str) -> float:
    cooled = picker.app.router.health.cooled(ref)
    return 0.0 if cooled is None else cooled.remaining(picker.app.router.health.now())


@pytest.mark.parametrize(
    ("reason", "seconds"),
    [
        (pb.AbortRequest.BACKEND_UNAUTHORIZED, 300),
        (pb.AbortRequest.BACKEND_UNRESOLVED, 60),
    ],
    ids=["unauthorized", "unresolved"],
)
async def test_abort_cools_a_provider_until_cleared(
    start_picker: PickerFactory, reason: int, seconds: float
) -> None:
    picker = await _picker(start_picker)
    first = await _pick(picker)
    assert where(first) == TO_PRIMARY
    await _abort(picker, first.response_id, reason, "secret key missing")
    assert seconds - 5 < _remaining(picker, PRIMARY) <= seconds
    label = pb.AbortRequest.Reason.Name(reason).lower()
    cooldown = picker.metric(
        "kinference_provider_cooldown_seconds", {"provider": PRIMARY, "reason": label}
    )
    assert seconds - 5 < cooldown <= seconds

    second = await _pick(picker)
    assert where(second) == TO_BACKUP
    assert second.requested_model == MODEL
    body = await picker.client.pull_all(second.response_id)
    assert b'"gpt-4o-backup"' in body

    await _abort(picker, second.response_id, pb.AbortRequest.BACKEND_UNRESOLVED, "no such backend")
    nothing = await _pick(picker)
    assert nothing.outcome == NO_WORKERS, where(nothing)
    assert PRIMARY in nothing.reason and BACKUP in nothing.reason, nothing.reason
    assert "cooling down" in nothing.reason

    assert picker.app.router.health.clear(PRIMARY)
    assert where(await _pick(picker)) == TO_PRIMARY
    assert picker.app.router.health.clear(BACKUP)
    assert not picker.app.router.health.clear(BACKUP)  # nothing left to clear


async def test_abort_for_other_reasons_does_not_cool(start_picker: PickerFactory) -> None:
    picker = await _picker(start_picker)
    for reason in (pb.AbortRequest.NOT_DISPATCHED, pb.AbortRequest.PULL_FAILED):
        result = await _pick(picker)
        assert where(result) == TO_PRIMARY
        await _abort(picker, result.response_id, reason, "client went away")
    assert where(await _pick(picker)) == TO_PRIMARY


async def test_abort_after_the_request_was_released_still_counts(
    start_picker: PickerFactory,
) -> None:
    picker = await _picker(start_picker)
    first = await _pick(picker)
    assert where(first) == TO_PRIMARY
    await picker.client.pull_all(first.response_id)
    await picker.client.first_token(first.response_id, 120, upstream_status=200)
    assert (await picker.client.final_token(first.response_id, model="gpt-4o")).acknowledged
    assert len(picker.app.inflight) == 0

    await _abort(picker, first.response_id, pb.AbortRequest.BACKEND_UNAUTHORIZED, "late")
    assert where(await _pick(picker)) == TO_BACKUP
    # A second late Abort for the same id is tolerated too.
    await _abort(picker, first.response_id, pb.AbortRequest.BACKEND_UNAUTHORIZED, "again")


async def test_rate_limited_cools_for_its_period_then_returns(start_picker: PickerFactory) -> None:
    picker = await _picker(start_picker)
    first = await _pick(picker)
    assert where(first) == TO_PRIMARY
    reported = time.monotonic()
    ack = await picker.client.first_token(first.response_id, 30, upstream_status=429)
    assert ack.acknowledged
    assert 0 < _remaining(picker, PRIMARY) <= RATE_LIMITED_S
    assert where(await _pick(picker)) == TO_BACKUP

    await wait_until(
        lambda: _remaining(picker, PRIMARY) == 0, RATE_LIMITED_S + 10, "cool-down over"
    )
    assert time.monotonic() - reported >= RATE_LIMITED_S * 0.9
    assert where(await _pick(picker)) == TO_PRIMARY


@pytest.mark.parametrize(
    ("status", "reason"),
    [(401, "backend_unauthorized"), (403, "backend_unauthorized"), (404, "not_found")],
)
async def test_upstream_auth_and_not_found_cool_at_once(
    start_picker: PickerFactory, status: int, reason: str
) -> None:
    picker = await _picker(start_picker)
    first = await _pick(picker)
    await picker.client.first_token(first.response_id, 10, upstream_status=status)
    cooled = picker.app.router.health.cooled(PRIMARY)
    assert cooled is not None and cooled.reason == reason
    assert where(await _pick(picker)) == TO_BACKUP


async def test_server_errors_cool_only_past_the_threshold(start_picker: PickerFactory) -> None:
    picker = await _picker(start_picker)
    for status in (500, 503):
        result = await _pick(picker)
        assert where(result) == TO_PRIMARY
        await picker.client.first_token(result.response_id, 10, upstream_status=status)
    result = await _pick(picker)
    assert where(result) == TO_PRIMARY  # two 5xx: below the threshold of 3
    await picker.client.first_token(result.response_id, 10, upstream_status=502)
    assert where(await _pick(picker)) == TO_BACKUP


async def test_a_repeat_extends_and_never_shortens(start_picker: PickerFactory) -> None:
    picker = await _picker(start_picker)
    first = await _pick(picker)
    await _abort(picker, first.response_id, pb.AbortRequest.BACKEND_UNAUTHORIZED, "bad key")
    long_left = _remaining(picker, PRIMARY)
    assert long_left > 250
    # A rate-limit report (1 s) while cooling for 300 s leaves the longer deadline.
    picker.app.router.health.upstream_status(PRIMARY, 429)
    assert _remaining(picker, PRIMARY) > 250
    assert picker.app.router.health.cooled(PRIMARY).count == 2  # type: ignore[union-attr]


async def test_success_reports_do_not_cool(start_picker: PickerFactory) -> None:
    picker = await _picker(start_picker)
    for status in (200, 201, 0, 302):
        result = await _pick(picker)
        assert result.outcome == OK
        assert where(result) == TO_PRIMARY
        await picker.client.first_token(result.response_id, 10, upstream_status=status)
    assert picker.app.router.health.cooled(PRIMARY) is None
