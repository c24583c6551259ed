"""A prompt field too large to be parsed at Pick (`LargeValue`) is decoded on the tokenizer
thread from its span's bytes by msgspec's decoder (no `str` copy of a 1 MiB span first:
h93 found the event loop's stalls at 1 MiB are its waits for the GIL this decode holds);
what msgspec refuses still gets `json.loads`'s value or error."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kinference.bodies import Body
from kinference.requests import LargeValue
from kinference.requests.fields import STRICT_PARSE_BYTES
from kinference.requests.parse import parse_request
from kinference.tokenize import source
from kinference.tokenize.source import prompt_text
from kinference.tokenize.tokenizer import Untokenizable


def _chat(messages_json: str) -> Body:
    raw = ('{"model": "m", "messages": ' + messages_json + "}").encode()
    return Body([raw[: 1 << 20], raw[1 << 20 :]], reserved=len(raw))


def _messages(extra: str = "") -> str:
    long = "line of text\n" * (STRICT_PARSE_BYTES // 13 + 1)
    return json.dumps([{"role": "system", "content": long}, {"role": "user", "content": "hi"}])[
        :-1
    ] + (extra + "]")


def test_large_messages_are_decoded_without_json_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    body = _chat(_messages())
    request = parse_request(body)
    assert isinstance(request.fields.values["messages"], LargeValue)
    expected = json.loads(_messages())

    def refused(*_: Any, **__: Any) -> Any:
        raise AssertionError("json.loads decoded a value msgspec takes")

    monkeypatch.setattr(source.json, "loads", refused)
    text = prompt_text(request, body)
    assert text is not None and text.messages == expected


def test_what_msgspec_refuses_gets_json_loads_value() -> None:
    # NaN is not RFC 8259 JSON: msgspec refuses it, json.loads takes it.
    body = _chat(_messages(', {"role": "user", "content": "x", "weight": NaN}'))
    request = parse_request(body)
    text = prompt_text(request, body)
    assert text is not None and text.messages is not None
    assert text.messages[-1]["role"] == "user" and text.messages[-1]["weight"] != 0


def test_a_large_value_that_does_not_parse_is_untokenizable() -> None:
    body = _chat(_messages())
    request = parse_request(body)
    value = request.fields.values["messages"]
    assert isinstance(value, LargeValue)
    broken = Body([body.read_span(0, value.end - 1) + b"}"], reserved=body.size)
    with pytest.raises(Untokenizable):
        prompt_text(request, broken)
