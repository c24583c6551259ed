"""What crosses to the parse worker: the body without the inside of the long strings the
parse never reads, rebuilt there to the same request; and what comes back, trimmed."""

from __future__ import annotations

import json

from kinference.bodies import Body
from kinference.requests import JsonScanner, LargeValue, parse_request
from kinference.requests.shipping import (
    RETURNED_VALUE_BYTES,
    payload,
    rebuilt,
    returned,
    shipped_spans,
)
from tests.requests import pieces_of, scanner_for

MiB = 1 << 20


def scanned_body(data: bytes) -> Body:
    pieces = pieces_of(data, 256 * 1024)
    return Body(pieces, reserved=len(data), observer=scanner_for(pieces))


def in_worker(body: Body) -> Body:
    """The body the worker rebuilds from what is shipped (the scanner pickled with it)."""
    spans = shipped_spans(body)
    data = b"".join(bytes(piece) for piece in payload(body, spans))
    observer = body.observer if isinstance(body.observer, JsonScanner) else None
    return Body(rebuilt(body.size, spans, data), reserved=0, observer=observer)


def image_body(image_bytes: int) -> bytes:
    image = "data:image/png;base64," + "A" * image_bytes
    content = [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": image}},
    ]
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": content}]}).encode()


def test_a_huge_image_ships_only_its_ends_and_parses_the_same() -> None:
    body = scanned_body(image_body(8 * MiB))
    spans = shipped_spans(body)
    assert sum(end - start for start, end in spans) < 16 * 1024
    local, remote = parse_request(body), parse_request(in_worker(body))
    assert remote.prompt == local.prompt and remote.token_estimate == local.token_estimate
    assert remote.fields.spans == local.fields.spans


def test_a_body_of_many_small_strings_ships_whole() -> None:
    messages = [{"role": "user", "content": "word " * 20}] * 20_000
    body = scanned_body(json.dumps({"model": "m", "messages": messages}).encode())
    assert shipped_spans(body) == [(0, body.size)]
    assert parse_request(in_worker(body)).prompt == parse_request(body).prompt


def test_large_values_come_back_as_spans_that_hold_them() -> None:
    data = json.dumps(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": f"f{i}"}} for i in range(5000)],
            "stream_options": {"include_usage": True},
            "stream": True,
        }
    ).encode()
    body = scanned_body(data)
    request = parse_request(body)
    trimmed = returned(request)
    assert not isinstance(trimmed, str)
    tools = trimmed.fields.values["tools"]
    assert isinstance(tools, LargeValue)
    assert json.loads(body.read_span(tools.start, tools.end)) == request.fields.values["tools"]
    assert trimmed.fields.values["stream_options"] == {"include_usage": True}
    assert trimmed.prompt == request.prompt and trimmed.has_tools


def test_a_value_field_over_the_bound_is_malformed() -> None:
    data = json.dumps(
        {"model": "m", "prompt": "hi", "stream_options": {"x": "y" * RETURNED_VALUE_BYTES}}
    ).encode()
    trimmed = returned(parse_request(scanned_body(data)))
    assert isinstance(trimmed, str) and "stream_options" in trimmed
