"""Reports, Aborts and pulls for one request sent at once and in any order, for sixteen
requests together: each request is settled exactly once and the load count stays true."""

from __future__ import annotations

from collections import Counter
from typing import Any

import grpc

from kinference.v1 import picker_pb2 as pb
from tests.api.helpers import ALL_ENDPOINTS, KiB, pick_ok, wait_nothing_held
from tests.api.test_crowd import CROWD, bodies, outcomes, together
from tests.conftest import MODEL, RunningPicker


def settled(results: list[Any]) -> int:
    """How many of a request's calls released it: an acknowledged final report or a
    released Abort."""
    return sum(
        1
        for r in results
        if isinstance(r, pb.ReportFinalTokenResponse | pb.AbortResponse)
        and (r.acknowledged if isinstance(r, pb.ReportFinalTokenResponse) else r.released)
    )


async def test_duplicate_and_out_of_order_reports_settle_each_request_once(
    picker: RunningPicker,
) -> None:
    client = picker.client
    sent = bodies(64 * KiB)
    picks = [await pick_ok(picker, body) for body in sent]

    def calls(rid: int) -> list[Any]:
        finals = [client.final_token(rid, model=MODEL, prompt_tokens=2) for _ in range(4)]
        firsts = [client.first_token(rid, 7) for _ in range(4)]
        return [*finals, client.pull_all(rid), *firsts, client.abort(rid), client.abort(rid)]

    results = await together([call for p in picks for call in calls(p.response_id)])
    per_request = 11  # the calls above, per request
    for i in range(CROWD):
        mine = results[i * per_request : (i + 1) * per_request]
        assert settled(mine) == 1, mine
        pulled = mine[4]
        if isinstance(pulled, grpc.aio.AioRpcError):
            assert pulled.code() == grpc.StatusCode.NOT_FOUND
        else:
            assert pulled == sent[i]
    assert set(outcomes(results)) <= {"ok", "NOT_FOUND"}
    await wait_nothing_held(picker)
    # The load count was released once per request, never twice: a fresh round spreads
    # evenly over the three endpoints, as least-in-flight does from zero.
    fresh = [await pick_ok(picker) for _ in range(6)]
    assert Counter(p.local.endpoint for p in fresh) == dict.fromkeys(ALL_ENDPOINTS, 2)
    await together([client.abort(p.response_id) for p in fresh])
    await wait_nothing_held(picker)
