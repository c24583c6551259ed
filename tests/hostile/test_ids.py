"""Ids handed out by a real server are unguessable: no sequence, no reuse, every bit fair,
and a restarted server draws a fresh series.

`tests/bodies/test_ids.py` checks the generator itself; this checks what callers see. The
bounds are set so that a fair 64-bit random source fails them with odds below 1 in 10^4.
"""

from __future__ import annotations

import itertools
import math

from kinference.v1 import picker_pb2 as pb
from tests.api.helpers import chat_body, wait_nothing_held
from tests.conftest import PickerFactory, RunningPicker

FLOWS = 400  # each gives a stream id and a response id
BITS = 64
SIGMAS = 5.0  # per-bit tolerance on the share of ones
# Chi-square of the top 4 bits over 16 buckets (15 degrees of freedom): P(> 60) < 1e-6.
CHI2_TOP_NIBBLE = 60.0


async def draw_ids(picker: RunningPicker, flows: int) -> tuple[list[int], list[int]]:
    """(stream ids, response ids) of `flows` push-pick-abort flows, in the order given."""
    body = chat_body()
    streams, responses = [], []
    for _ in range(flows):
        pushed = await picker.client.push([body], declared_length=len(body))
        pick = await picker.client.pick(pushed.stream_id)
        assert pick.outcome == pb.PickResponse.OK
        await picker.client.abort(pick.response_id)
        streams.append(pushed.stream_id)
        responses.append(pick.response_id)
    return streams, responses


def assert_fair_bits(ids: list[int]) -> None:
    n = len(ids)
    tolerance = SIGMAS * 0.5 / math.sqrt(n)
    for bit in range(BITS):
        share = sum((value >> bit) & 1 for value in ids) / n
        assert abs(share - 0.5) < tolerance, f"bit {bit} is set in {share:.3f} of the ids"
    counts = [0] * 16
    for value in ids:
        counts[value >> (BITS - 4)] += 1
    expected = n / 16
    chi2 = sum((count - expected) ** 2 / expected for count in counts)
    assert chi2 < CHI2_TOP_NIBBLE, f"top 4 bits are skewed: {counts}"


def assert_no_sequence(ids: list[int]) -> None:
    steps = [(b - a) % (1 << BITS) for a, b in itertools.pairwise(ids)]
    assert len(set(steps)) == len(steps), "two equal steps between consecutive ids"
    xors = [a ^ b for a, b in itertools.pairwise(ids)]
    assert len(set(xors)) == len(xors), "two equal xor-steps between consecutive ids"


async def test_ids_from_a_real_server_are_unguessable(start_picker: PickerFactory) -> None:
    first = await start_picker()
    streams, responses = await draw_ids(first, FLOWS)
    every = streams + responses
    assert 0 not in every
    assert len(set(every)) == len(every), "an id was handed out twice"
    for series in (streams, responses):
        assert_no_sequence(series)
    assert_fair_bits(every)
    await wait_nothing_held(first)
    # A restart (here: a second instance) draws a series of its own, not the same one.
    second = await start_picker()
    again_streams, again_responses = await draw_ids(second, 50)
    assert not set(again_streams + again_responses) & set(every)
    assert again_streams[:5] != streams[:5]
    await wait_nothing_held(second)
