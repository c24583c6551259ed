"""rewrite: splices exactly the intended changes, shares every untouched byte, or returns as is."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinference.bodies import Body
from kinference.requests import (
    InferenceRequest,
    RewritePlan,
    Shape,
    parse_request,
    rewrite,
)
from kinference.requests.rewrite import _changes, _members
from kinference.requests.splice import edits
from tests.requests import pieces_of, scanned_body, uploaded_body, whole_body
from tests.requests.samples import SAMPLES

USAGE = RewritePlan(include_usage=True)
TO_MCT = RewritePlan(max_tokens_field="max_completion_tokens")
TO_MT = RewritePlan(max_tokens_field="max_tokens")


def apply(data: bytes, plan: RewritePlan, body: Body | None = None) -> bytes:
    body = whole_body(data) if body is None else body
    return b"".join(bytes(p) for p in rewrite(body, parse_request(body), plan).pieces)


@pytest.mark.parametrize(
    ("data", "plan", "expected"),
    [
        # The hint member goes, with exactly one comma, wherever it is.
        (
            b'{"kinference":{"hint":"x"},"model":"m","prompt":"p"}',
            RewritePlan(),
            b'{"model":"m","prompt":"p"}',
        ),
        (
            b'{"model":"m","prompt":"p","kinference":{}}',
            RewritePlan(),
            b'{"model":"m","prompt":"p"}',
        ),
        (
            b'{ "model": "m" , "kinference" : {} , "prompt": "p" }',
            RewritePlan(),
            b'{ "model": "m" , "prompt": "p" }',
        ),
        (
            b'{"kinference":{},"model":"m","kinference":{},"prompt":"p","kinference":{}}',
            RewritePlan(),
            b'{"model":"m","prompt":"p"}',
        ),
        (
            b'{\n  "model": "m",\n  "prompt": "p",\n  "kinference": {"hint": "h"}\n}',
            RewritePlan(),
            b'{\n  "model": "m",\n  "prompt": "p"}',  # the last value's trailing space goes too
        ),
        # The model value is replaced, surrounding whitespace included.
        (b'{"model" : "a" ,"prompt":"p"}', RewritePlan(model="b"), b'{"model" :"b","prompt":"p"}'),
        (
            b'{"model":"a","prompt":"p"}',
            RewritePlan(model="\u00e9"),
            b'{"model":"\\u00e9","prompt":"p"}',
        ),
        # stream_options: added before the closing brace, or set inside.
        (
            b'{"model":"m","messages":[],"stream":true}',
            USAGE,
            b'{"model":"m","messages":[],"stream":true,"stream_options":{"include_usage":true}}',
        ),
        (
            b'{"model":"m","messages":[],"stream":true,"kinference":{}}',
            USAGE,
            b'{"model":"m","messages":[],"stream":true,"stream_options":{"include_usage":true}}',
        ),
        (
            b'{"model":"m","prompt":"p","stream":true,"stream_options":{"x":1,"include_usage":false}}',
            USAGE,
            b'{"model":"m","prompt":"p","stream":true,'
            b'"stream_options":{"x": 1, "include_usage": true}}',
        ),
        (
            b'{"model":"m","prompt":"p","stream":true,"stream_options":null}',
            USAGE,
            b'{"model":"m","prompt":"p","stream":true,"stream_options":{"include_usage":true}}',
        ),
        # max_tokens <-> max_completion_tokens.
        (
            b'{"model":"m","messages":[],"max_tokens":5}',
            TO_MCT,
            b'{"model":"m","messages":[],"max_completion_tokens":5}',
        ),
        (
            b'{"max_completion_tokens":5,"model":"m","messages":[]}',
            TO_MT,
            b'{"max_tokens":5,"model":"m","messages":[]}',
        ),
        (
            b'{"max_tokens":1,"model":"m","messages":[],"max_tokens":5}',
            TO_MCT,
            b'{"model":"m","messages":[],"max_completion_tokens":5}',
        ),
        (
            b'{"model":"m","messages":[],"max_tokens":5,"max_completion_tokens":9}',
            TO_MCT,
            b'{"model":"m","messages":[],"max_completion_tokens":9}',
        ),
        (
            b'{"model":"m","messages":[],"max_tokens":5,"max_completion_tokens":null}',
            TO_MCT,
            b'{"model":"m","messages":[],"max_completion_tokens":5}',
        ),
    ],
)
def test_exact_splices(data: bytes, plan: RewritePlan, expected: bytes) -> None:
    assert apply(data, plan) == expected
    assert apply(data, plan, scanned_body(data, 3)) == expected


@pytest.mark.parametrize(
    ("data", "plan"),
    [
        (b'{"model":"m","prompt":"p"}', RewritePlan()),
        (b'{"model":"m","prompt":"p"}', RewritePlan(model="m")),
        (b'{"model":"m","prompt":"p","max_tokens":3}', TO_MCT),  # completions: one spelling
        (b'{"model":"m","messages":[],"max_completion_tokens":3}', TO_MCT),
        (b'{"model":"m","messages":[]}', USAGE),  # not streaming
        (b'{"model":"m","input":"x","stream":true}', USAGE),  # responses: no stream_options
        (b'{"model":"m","max_tokens":9,"system":"s","messages":[],"stream":true}', USAGE),
        (
            b'{"model":"m","messages":[],"stream":true,"stream_options":{"include_usage":true}}',
            USAGE,
        ),
        (b'{"model":"m","max_tokens":9,"system":"s","messages":[]}', TO_MCT),  # Anthropic
    ],
)
def test_untouched_bodies_are_returned_as_is(data: bytes, plan: RewritePlan) -> None:
    for body in (whole_body(data), scanned_body(data)):
        assert rewrite(body, parse_request(body), plan) is body


def test_only_replacement_bytes_are_new() -> None:
    blob = b"QUJD" * (1 << 19)
    data = (
        b'{"kinference":{"hint":"h"},"model":"m","messages":[{"role":"user","content":"'
        + blob
        + b'"}],"stream":true,"max_tokens":5}'
    )
    body = uploaded_body(data, 65_536)
    plan = RewritePlan(
        model="big-model", include_usage=True, max_tokens_field="max_completion_tokens"
    )
    result = rewrite(body, parse_request(body), plan)
    assert new_bytes(body, result) == len(b'"big-model"') + len(
        b'"max_completion_tokens"' + b',"stream_options":{"include_usage":true}'
    )
    assert json.loads(b"".join(bytes(p) for p in result.pieces)) == {
        "model": "big-model",
        "messages": [{"role": "user", "content": blob.decode()}],
        "stream": True,
        "max_completion_tokens": 5,
        "stream_options": {"include_usage": True},
    }
    assert result.reserved == body.reserved


def new_bytes(original: Body, result: Body) -> int:
    """Bytes of `result` not shared with `original` (views into it or its very pieces)."""
    held = {id(piece) for piece in original.pieces}
    return sum(
        len(piece) for piece in result.pieces if isinstance(piece, bytes) and id(piece) not in held
    )


# --- the property: json.loads(rewritten) is the intended document ----------------------------


def intended(doc: dict[str, Any], request: InferenceRequest, plan: RewritePlan) -> dict[str, Any]:
    """What the rewrite must produce, written from the specification, on the parsed dict."""
    out = dict(doc)
    out.pop("kinference", None)
    if plan.model is not None:
        out["model"] = plan.model
    if (
        plan.include_usage
        and out.get("stream") is True
        and request.shape in (Shape.CHAT, Shape.COMPLETION)
    ):
        out["stream_options"] = {**(out.get("stream_options") or {}), "include_usage": True}
    target = plan.max_tokens_field
    if target is not None and request.shape is Shape.CHAT:
        other = "max_tokens" if target == "max_completion_tokens" else "max_completion_tokens"
        if other in out:
            value = out.pop(other)
            if out.get(target) is None:
                out[target] = value
    return out


EXTRAS: list[tuple[str, list[Any]]] = [
    ("stream", [True, True, False, None]),
    (
        "stream_options",
        [None, {}, {"include_usage": False}, {"include_usage": True}, {"a": [1, {"b": 2}]}],
    ),
    ("max_tokens", [None, 5, 0]),
    ("max_completion_tokens", [None, 7]),
    ("kinference", [{}, {"hint": "h"}, {"hint": None}]),
]


def random_members(rng: random.Random) -> list[tuple[str, Any]]:
    doc, _ = SAMPLES[rng.choice(sorted(SAMPLES))]
    members = list(doc.items())
    for key, choices in EXTRAS:
        if rng.random() < 0.45:
            members.insert(rng.randrange(len(members) + 1), (key, rng.choice(choices)))
    for _ in range(rng.choice([0, 0, 1, 3])):  # repeated keys: the last one counts
        members.insert(rng.randrange(len(members) + 1), rng.choice(members))
    if rng.random() < 0.3:
        members.insert(rng.randrange(len(members) + 1), ("user", "u-1"))
    return members


def ws(rng: random.Random) -> str:
    return "".join(rng.choice(" \t\r\n") for _ in range(rng.choice([0, 0, 1, 2])))


def serialise(members: list[tuple[str, Any]], rng: random.Random) -> bytes:
    def value(v: Any) -> str:
        return json.dumps(
            v,
            ensure_ascii=rng.random() < 0.5,
            indent=rng.choice([None, None, 2]),
            separators=(ws(rng) + "," + ws(rng), ws(rng) + ":" + ws(rng)),
        )

    inner = ("," + ws(rng)).join(
        f"{ws(rng)}{json.dumps(k)}{ws(rng)}:{ws(rng)}{value(v)}{ws(rng)}" for k, v in members
    )
    return f"{ws(rng)}{{{inner}}}{ws(rng)}".encode()


def random_plan(rng: random.Random) -> RewritePlan:
    return RewritePlan(
        model=rng.choice(
            [None, None, "gpt-4.1", "meta-llama/Llama-3.1-8B-Instruct", "\u00e9\u6a21"]
        ),
        include_usage=rng.random() < 0.6,
        max_tokens_field=rng.choice([None, "max_tokens", "max_completion_tokens"]),
    )


def body_for(data: bytes, rng: random.Random, kind: str) -> Body:
    if kind == "whole":
        return Body(pieces_of(data, rng.choice([None, 5, 64])), reserved=len(data))
    if kind == "scanned":
        return scanned_body(data, rng.choice([1, 3, 7, 64, None]))
    return uploaded_body(data, rng.choice([65_536, 1 << 20, 99_999]), rng.choice([0, 256 * 1024]))


def check_property(rng: random.Random, kind: str) -> None:
    members = random_members(rng)
    if kind == "large":  # a member over the strict-parse limit: the body keeps its spans
        members.insert(rng.randrange(len(members) + 1), ("blob", "QUJD" * (300_000)))
    data = serialise(members, rng)
    doc = json.loads(data)
    body = body_for(data, rng, kind)
    request = parse_request(body)
    plan = random_plan(rng)
    result = rewrite(body, request, plan)
    expected = intended(doc, request, plan)
    if expected == doc:
        assert result is body
        return
    text = b"".join(bytes(p) for p in result.pieces)
    assert json.loads(text) == expected, (data, plan)
    assert new_bytes(body, result) < 200
    again = parse_request(Body(list(result.pieces), reserved=result.size))
    assert (again.model, again.shape, again.hint) == (expected["model"], request.shape, None)


@settings(max_examples=200, deadline=None, database=None)
@given(st.randoms(use_true_random=False), st.sampled_from(["whole", "scanned"]))
def test_rewrite_property(rng: random.Random, kind: str) -> None:
    check_property(rng, kind)


@settings(max_examples=40, deadline=None, database=None)
@given(st.randoms(use_true_random=False))
def test_rewrite_property_large_bodies(rng: random.Random) -> None:
    check_property(rng, "large")


def test_rewrite_property_seeded() -> None:
    rng = random.Random(1234)
    for index in range(600):
        check_property(rng, ["whole", "scanned", "whole"][index % 3])


@settings(max_examples=300, deadline=None, database=None)
@given(st.randoms(use_true_random=False))
def test_appended_member_spliced_as_the_member_walk_does(rng: random.Random) -> None:
    """The shortcut for a body that only gains a member (the usual stream) gives the same
    bytes as splicing at the spans the member walk finds."""
    members = [(k, v) for k, v in random_members(rng) if k not in ("stream_options", "kinference")]
    members.append(("stream", True))
    data = serialise(members, rng)
    body = Body(pieces_of(data, None), reserved=len(data))
    request = parse_request(body)
    result = rewrite(body, request, USAGE)
    if request.shape not in (Shape.CHAT, Shape.COMPLETION):
        assert result is body
        return
    changes = _changes(request, USAGE)
    assert changes.only_added()
    walked = body.spliced(edits(changes, *_members(body, request)))
    assert b"".join(bytes(p) for p in result.pieces) == b"".join(bytes(p) for p in walked.pieces)
