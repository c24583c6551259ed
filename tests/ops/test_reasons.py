"""Reason codes: real router and cluster reasons map to a fixed set, nothing caller-typed."""

from __future__ import annotations

from kinference.config import parse_policy
from kinference.ops.reasons import CODES, reason_code
from kinference.v1 import picker_pb2 as pb
from tests.api.helpers import chat_body
from tests.conftest import MODEL, PickerFactory
from tests.ops.helpers import OPS_POLICY

REASONS = {
    "no pool or provider serves model 'x'": "unknown_model",
    "pool team/x is not known": "unknown_pool",
    "tenant 'a' matches no tenant rule": "tenant_rule",
    "tenant 'a' may not use model 'm'": "tenant_rule",
    "tenant 'a' may not use QoS class BATCH": "tenant_rule",
    "tenant 'a' used its budget: 10 of 5 tokens in the last minute": "tenant_budget",
    "tenant 'a' used its share of the budget while Redis is away: 9 of 4 tokens": "tenant_budget",
    "pool default/chat is saturated: DEFERRABLE requests are shed first": "shed_saturated",
    "pool default/chat is saturated past the BATCH limit: BATCH requests are shed": (
        "shed_saturated"
    ),
    "pool default/chat is saturated": "saturated",
    "provider ai/openai is cooling down (rate_limited, 30s left)": "provider_cooling",
    "pool default/chat has no ready endpoint": "no_ready_endpoint",
    "the named pool a/b does not serve 'm'": "no_target",
    "provider ai/x has no endpoint for embeddings requests": "no_target",
    "no target of 'm' matches": "no_target",
    "no full prefix-cache signal: tools too large": "partial_prompt",
    "shared state is 3.2s old: Redis unreachable": "shared_state",
    "shared state not loaded from Redis yet (0.5s)": "shared_state",
    "something new": "other",
}


def test_known_reasons_map_to_their_codes() -> None:
    for reason, code in REASONS.items():
        assert reason_code("no_workers", reason) == code, reason
    assert reason_code("ok", "") == "none"
    assert reason_code("bad_request", '"model" is empty') == "malformed"
    assert set(REASONS.values()) | {"none", "malformed"} == CODES


def test_the_first_note_of_a_joined_reason_wins() -> None:
    joined = "provider ai/x is cooling down (x, 3s left); pool default/chat has no ready endpoint"
    assert reason_code("no_workers", joined) == "provider_cooling"


async def test_live_picks_count_their_codes(start_picker: PickerFactory) -> None:
    policy = OPS_POLICY.replace("default_tenant_action: allow", "default_tenant_action: reject")
    picker = await start_picker(parse_policy(policy))
    client = picker.client
    rejected = await client.pick((await client.push([chat_body()])).stream_id, tenant="nobody")
    assert rejected.outcome == pb.PickResponse.POLICY_REJECTED
    pool = ("team", "none")
    unknown_pool = await client.pick((await client.push([chat_body(MODEL)])).stream_id,
                                     tenant="team-a", pool=pool)  # fmt: skip
    assert unknown_pool.outcome == pb.PickResponse.NO_WORKERS
    reasons = "kinference_pick_reasons_total"
    assert picker.metric(reasons, {"outcome": "policy_rejected", "reason": "tenant_rule"}) == 1
    assert picker.metric(reasons, {"outcome": "no_workers", "reason": "unknown_pool"}) == 1
