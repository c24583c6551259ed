"""Reports no request could have produced, from a buggy or hostile caller, against the real
server: a first token later than the time since the Pick (a caller's clock going back,
wrapped to the uint32's top) or, folded into the final report, come before the Pick, token
counts at the uint32's top, cached tokens past the prompt. None may price a worker out of
routing: a worker priced out gets no request, so no later report ever corrects what it was
taught."""

from __future__ import annotations

import math
import time
from collections import Counter

from kinference.reports import TTFT_ROUNDING_MS
from tests.api.helpers import ALL_ENDPOINTS, chat_body, pick_ok, wait_nothing_held
from tests.conftest import MODEL, RunningPicker

UINT32_MAX = 2**32 - 1


async def test_a_first_token_later_than_the_time_since_the_pick_is_not_learned_as_is(
    picker: RunningPicker,
) -> None:
    """Before: one report of 4294967295 ms taught its worker a 10 s fixed cost (the most
    the fit keeps) on every replica, and no request went there again to teach otherwise."""
    client, router = picker.client, picker.app.router
    started = time.monotonic()  # before the Pick: the server's span lies within the test's
    picked = await pick_ok(picker, chat_body(content="the first question"))
    await client.first_token(picked.response_id, UINT32_MAX)
    final = await client.final_token(
        picked.response_id, model=MODEL, prompt_tokens=UINT32_MAX, completion_tokens=UINT32_MAX,
        cached_tokens=UINT32_MAX, itl_bucket_counts=[UINT32_MAX] * 15,
    )  # fmt: skip
    assert final.acknowledged
    most_ms = (time.monotonic() - started) * 1000.0 + TTFT_ROUNDING_MS  # the TTFT possible
    slot = router.table.slot(picked.local.endpoint)
    rates = router.learning.rates
    assert router.table.ttft_ms(MODEL)[slot] <= most_ms
    # Prompt tokens past anything the prompt could hold: no prefill sample at all
    # (`samples.is_prompt_sample`; h192 had one of no uncached token, all reported cached).
    assert math.isnan(rates.learned(MODEL, "prefill_base_ms", slot))
    assert math.isnan(rates.learned(MODEL, "prefill_ms_per_token", slot))
    await wait_nothing_held(picker)
    # The worker still takes its share of cold prompts, as its peers do.
    fresh = [await pick_ok(picker, chat_body(content=f"cold {n}")) for n in range(6)]
    assert Counter(p.local.endpoint for p in fresh) == dict.fromkeys(ALL_ENDPOINTS, 2)


async def test_a_first_token_folded_in_from_before_the_pick_is_not_learned_as_is(
    picker: RunningPicker,
) -> None:
    """`kinference-first-token` on the final report says the first token came AGO_MS
    before it: an AGO_MS longer than the time since the Pick (a caller's clock gone back)
    made a service time of up to 2^32 ms (before: 1.4e9 ms learned from one report),
    pricing its worker out whenever anything runs there, on every replica."""
    client, rates = picker.client, picker.app.router.learning.rates
    started = time.monotonic()  # before the Pick: the server's span lies within the test's
    picked = await pick_ok(picker, chat_body(content="a question"))
    final = await client.final_token(
        picked.response_id, model=MODEL, prompt_tokens=10, completion_tokens=10,
        first_token=(5, 200, 4_000_000_000),
    )  # fmt: skip
    assert final.acknowledged
    most_ms = (time.monotonic() - started) * 1000.0  # the longest service time possible
    slot = picker.app.router.table.slot(picked.local.endpoint)
    assert rates.learned(MODEL, "service_ms", slot) <= max(most_ms, rates.prior_service_ms)
    await wait_nothing_held(picker)
