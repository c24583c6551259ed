"""bench_gateway_streams' arithmetic: first content told from the role chunk, added TTFT."""

from __future__ import annotations

import json

from loadtest.bench_gateway_streams import Slice, _has_content, prompt_body, table

ROLE = b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'
TOKEN = b'data: {"choices":[{"delta":{"content":" lorem"}}]}\n\n'


def test_the_first_content_is_a_chunk_with_text_not_the_role_chunk() -> None:
    assert not _has_content(ROLE)
    assert _has_content(TOKEN)
    assert _has_content(ROLE + TOKEN)  # the opening and a first token in one read
    assert not _has_content(b'data: {"choices":[],"usage":{"prompt_tokens":3}}\n\n')


def test_every_prompt_shares_its_prefix_and_asks_for_a_stream_with_usage() -> None:
    first, second = (json.loads(prompt_body("notes", i, 50)) for i in (1, 2))
    assert first["messages"][0] == second["messages"][0] == {"role": "system", "content": "notes"}
    assert first["messages"][1] != second["messages"][1]
    assert first["stream"] and first["stream_options"] == {"include_usage": True}
    assert first["max_tokens"] == 50


def test_the_table_gives_what_each_system_adds_to_the_engine_per_rate() -> None:
    def slice_of(ttft_ms: float, head_ms: float) -> Slice:
        return Slice([head_ms / 1000] * 100, [ttft_ms / 1000] * 100, cpu_s=0.2)

    results = {
        ("engine (direct)", 6.0): slice_of(12.0, 1.0),
        ("kinference", 6.0): slice_of(13.5, 2.5),
        ("engine (direct)", 18.0): slice_of(12.0, 1.0),
        ("kinference", 18.0): slice_of(14.0, 3.0),
    }
    lines = table(results)
    assert len(lines) == 2 + 4
    assert lines[2].startswith("| engine (direct) | 6 | 12.0 | 12.0 | 12.0 |  |  |  | 1.0 |")
    assert (
        "| kinference | 6 | 13.5 | 13.5 | 13.5 | 1.5 | 1.5 | 1.5 | 2.5 | 2.5 | 2.00 | 100 (0) |"
        in lines
    )
    assert lines[5].startswith("| kinference | 18 | 14.0 | 14.0 | 14.0 | 2.0 | 2.0 | 2.0 |")
