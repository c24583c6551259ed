"""Reason codes: real router and cluster reasons map to a fixed set, nothing caller-typed."""

from __future__ import annotations

from kinference.config import parse_policy
from kinference.ops.reasons import CODES, label
from kinference.routing.reasons import Reason
from kinference.v1 import picker_pb2 as pb
from tests.api.helpers import chat_body
from tests.conftest import MODEL, PickerFactory
from tests.ops.helpers import OPS_POLICY


def test_every_code_is_a_label_and_labels_are_the_codes() -> None:
    assert frozenset(label(code) for code in Reason) == CODES
    assert len(CODES) == len(Reason)
    assert all(code.isidentifier() and code.islower() for code in CODES)


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
