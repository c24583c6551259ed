"""The traffic helper really makes the new request series appear (the other tests rely on
it), with the values the reports imply."""

from __future__ import annotations

from kinference.config import parse_policy
from tests.api.helpers import chat_body
from tests.conftest import MODEL, PickerFactory
from tests.ops.helpers import OPS_POLICY, Exposition, exercise


async def test_exercise_fills_the_request_series(start_picker: PickerFactory) -> None:
    picker = await start_picker(parse_policy(OPS_POLICY))
    await exercise(picker)
    assert picker.metric("kinference_pick_reasons_total", {"outcome": "ok", "reason": "none"}) == 3
    unknown = {"outcome": "no_workers", "reason": "unknown_model"}
    assert picker.metric("kinference_pick_reasons_total", unknown) == 1
    bad = {"outcome": "bad_request", "reason": "malformed"}
    assert picker.metric("kinference_pick_reasons_total", bad) == 1
    assert picker.metric("kinference_ttft_seconds_count", {"destination": "local"}) == 1
    assert picker.metric("kinference_ttft_seconds_count", {"destination": "provider"}) == 1
    assert picker.metric("kinference_itl_seconds_bucket", {"le": "0.005"}) == 3
    assert picker.metric("kinference_itl_seconds_bucket", {"le": "0.02"}) == 11
    assert picker.metric("kinference_itl_seconds_bucket", {"le": "+Inf"}) == 12
    tenant = {"tenant": "team-a", "kind": "prompt"}
    assert picker.metric("kinference_tenant_tokens_total", tenant) == 40
    reported = {"source": "reported"}
    assert picker.metric("kinference_prefix_cached_tokens_total", reported) == 16
    assert picker.metric("kinference_prefix_prompt_tokens_total") == 40
    # A first request has nothing cached anywhere: the prediction is zero blocks.
    assert picker.metric("kinference_prefix_cached_tokens_total", {"source": "predicted"}) == 0
    cooled = {"provider": "ai/openai", "reason": "backend_unauthorized"}
    assert picker.metric("kinference_provider_blacklisted", cooled) == 1


def test_exposition_skips_creation_times() -> None:
    page = (
        "# TYPE x_total counter\nx_total 1.0\n"
        "# TYPE x_created gauge\nx_created 1.7e9\n"
        '# TYPE h histogram\nh_bucket{le="+Inf"} 1.0\nh_count 1.0\nh_sum 2.0\n'
    )
    found = Exposition()
    found.add(page)
    assert found.families == {"x_total": "counter", "h": "histogram"}
    assert found.samples == {"x_total", "h_bucket", "h_count", "h_sum"}
    assert found.labels == set()
    assert found.family_labels == {"x_total": set(), "h": set()}


async def test_a_repeated_prompt_is_predicted_cached_on_its_worker(
    start_picker: PickerFactory,
) -> None:
    picker = await start_picker(parse_policy(OPS_POLICY))
    body = chat_body(content="a long shared system prompt " * 200)
    for cached in (0, 90):
        pick = await picker.client.pick((await picker.client.push([body])).stream_id)
        await picker.client.final_token(pick.response_id, model=MODEL, prompt_tokens=100,
                                        completion_tokens=5, cached_tokens=cached)  # fmt: skip
    predicted = picker.metric("kinference_prefix_cached_tokens_total", {"source": "predicted"})
    assert 90 <= predicted <= 100  # the second request: all (or all but a tail) of its blocks
    assert picker.metric("kinference_prefix_cached_tokens_total", {"source": "reported"}) == 90
    assert picker.metric("kinference_prefix_prompt_tokens_total") == 200
