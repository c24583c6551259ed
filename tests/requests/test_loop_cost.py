"""Where a body's parse runs: the upload's scan counts what the parse will decode, and a
body cheap by those counts is parsed on the loop whatever its size, a dense one is not."""

from __future__ import annotations

import json

import pytest

from kinference.requests import JsonScanner
from kinference.requests.loop_cost import LOOP_PARSE_S, SECONDS_PER_VALUE, parse_cost
from tests.requests import CHUNKINGS, scanned_body, uploaded_body, whole_body

KiB = 1 << 10


def chat(content: str, **extra: object) -> bytes:
    doc = {"model": "m", "messages": [{"role": "user", "content": content}], **extra}
    return json.dumps(doc).encode()


@pytest.mark.parametrize("size", CHUNKINGS)
def test_the_scan_counts_strings_their_bytes_and_brackets(size: int | None) -> None:
    data = b'{"a": ["xy", {"b": "\\"q\\""}], "c": [1, 2, [3]]}'
    scanner = scanned_body(data, size).observer
    assert isinstance(scanner, JsonScanner)
    # Strings: "a" "xy" "b" "\"q\"" "c"; bytes with their quotes: 3 + 4 + 3 + 7 + 3.
    assert (scanner.strings, scanner.string_bytes) == (5, 20)
    assert scanner.brackets == 5  # { [ { [ [


def test_an_ordinary_chat_body_of_hundreds_of_kib_is_parsed_on_the_loop() -> None:
    for size in (64 * KiB, 512 * KiB):
        data = chat("a question, with some words. " * (size // 29))
        cost = parse_cost(uploaded_body(data, 64 * KiB, observe_from=0))
        assert cost is not None and cost.on_loop, (size, cost)
        assert cost.values < 20


@pytest.mark.parametrize(
    "extra",
    [
        {"x": [1] * (3 * KiB)},  # 6 KiB of numbers
        {"tools": [{}] * (2 * KiB)},
        {"x": [[[[1]]]] * KiB},
    ],
    ids=["numbers", "tools of empty objects", "nested arrays"],
)
def test_a_body_of_a_few_thousand_values_is_not(extra: dict[str, object]) -> None:
    cost = parse_cost(uploaded_body(chat("hi", **extra), 64 * KiB, observe_from=0))
    assert cost is not None and not cost.on_loop
    assert cost.values > LOOP_PARSE_S / SECONDS_PER_VALUE


def test_whitespace_counts_as_values_it_could_be() -> None:
    data = chat("hi")[:-1] + b" " * (64 * KiB) + b"}"
    cost = parse_cost(uploaded_body(data, 64 * KiB, observe_from=0))
    assert cost is not None and not cost.on_loop


def test_long_strings_a_skeleton_replaces_are_not_decoded() -> None:
    data = chat("QUJD" * (600 * KiB))  # a 2.4 MiB member: its string becomes a marker
    cost = parse_cost(uploaded_body(data, 1 << 20, observe_from=0))
    assert cost is not None and cost.on_loop and cost.seconds < LOOP_PARSE_S / 100


def test_an_unscanned_body_has_no_estimate_and_a_refused_one_costs_nothing() -> None:
    assert parse_cost(whole_body(chat("hi"))) is None
    refused = parse_cost(scanned_body(b'{"model": "m", "x": [1, 2}'))
    assert refused is not None and refused.on_loop and refused.seconds == 0
