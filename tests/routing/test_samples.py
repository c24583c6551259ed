"""What a report may teach (`routing.samples`): a report's prompt tokens are held to the
Pick's estimate of that prompt, so that a count no engine makes (a uint32's top) teaches
no prefill, while a prompt the picker cannot count well (a document, a long recording or
video, estimated at a fixed size per part) still does."""

from __future__ import annotations

import math

from kinference.config import parse_policy
from kinference.routing.learning import Served
from kinference.routing.samples import is_prompt_sample
from tests.routing.test_router import chat, make

MODEL = "llama"
POLICY = f"pools: [{{name: chat, endpoints: ['10.0.0.1:8000'], models: [{MODEL}]}}]"


def with_part(kind: str) -> list[dict[str, object]]:
    parts: dict[str, dict[str, object]] = {
        "file": {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0="}},
        "audio": {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
    }
    return [{"type": "text", "text": "summarise this"}, parts[kind]]


def test_a_document_counted_far_past_its_estimate_still_teaches_its_prefill() -> None:
    """A PDF sent as a file part is estimated at 2,000 tokens whatever its pages; a 60-page
    one makes ~40,000. Before, such reports (past 16 times the estimate) taught no prefill:
    a pool serving documents never learned its engines' prefill rate."""
    for kind, reported in (("file", 40_000), ("audio", 9_000)):
        env = make(POLICY)
        decision = env.route(chat(content=with_part(kind)))  # type: ignore[arg-type]
        local = decision.local
        assert local is not None and local.fixed_tokens >= 500
        assert reported > 16 * local.prompt_tokens  # what the bound refused
        env.inflight.add(1, local, "")
        env.router.picked(local)
        env.router.first_token(local, 1500.0)
        served = Served(reported, 0, (), 1500.0, 3000.0)
        env.router.final(local, served)
        rates = env.router.learning.rates
        assert not math.isnan(rates.learned(MODEL, "prefill_ms_per_token", local.slot)), kind


def test_a_count_no_engine_makes_is_still_no_sample() -> None:
    assert not is_prompt_sample(2**32 - 1, 1000.0, 0)
    assert not is_prompt_sample(2**32 - 1, 3000.0, 2000)  # a document's too
    assert is_prompt_sample(16_000, 1000.0, 0) and not is_prompt_sample(16_001, 1000.0, 0)
    assert is_prompt_sample(4096, 0.0, 0) and not is_prompt_sample(4097, 0.0, 0)
    parse_policy(POLICY)
