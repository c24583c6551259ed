"""parse_request: the same model/shape/stream or MalformedRequest, however the body came in."""

from __future__ import annotations

import json
import random

import pytest

from kinference.bodies import Body
from kinference.requests import LargeValue, MalformedRequest, Shape, parse_request
from kinference.requests.spans import MAX_DEPTH, MAX_MEMBERS
from tests.requests import (
    Outcome,
    all_scanned,
    kind,
    pieces_of,
    scanned,
    scanner_for,
    whole,
)


def check_same_everywhere(data: bytes) -> Outcome:
    """The outcome of `data` parsed whole, which every scanned way must match."""
    expected = whole(data)
    for how, got in all_scanned(data):
        assert kind(got) == kind(expected), f"{how}: {got} != whole {expected}"
    return expected


def doc(**fields: object) -> bytes:
    return json.dumps(fields).encode()


CHAT = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (doc(model="m", messages=CHAT), ("ok", "m", Shape.CHAT, False)),
        (doc(model="m", messages=[], stream=True), ("ok", "m", Shape.CHAT, True)),
        (doc(model="m", prompt="once upon"), ("ok", "m", Shape.COMPLETION, False)),
        (doc(model="m", prompt=["a", "b"]), ("ok", "m", Shape.COMPLETION, False)),
        (doc(model="m", prompt=[[1, 2], [3]]), ("ok", "m", Shape.COMPLETION, False)),
        (doc(model="m", input="embed me"), ("ok", "m", Shape.EMBEDDINGS, False)),
        (doc(model="m", input=[1, 2]), ("ok", "m", Shape.EMBEDDINGS, False)),
        (doc(model="m", input="hi", stream=True), ("ok", "m", Shape.RESPONSES, True)),
        # "messages" is checked first, then "prompt", then "input".
        (doc(model="m", prompt="p", messages=CHAT), ("ok", "m", Shape.CHAT, False)),
        (doc(input="i", model="m", prompt="p"), ("ok", "m", Shape.COMPLETION, False)),
        (doc(model="m", stream=False, prompt="p"), ("ok", "m", Shape.COMPLETION, False)),
        (doc(model=" m/x:1 ", prompt="p"), ("ok", " m/x:1 ", Shape.COMPLETION, False)),
        (
            doc(model="\u00e9\U0001f600", prompt="p"),
            ("ok", "\u00e9\U0001f600", Shape.COMPLETION, False),
        ),
    ],
)
def test_requests(data: bytes, expected: Outcome) -> None:
    assert check_same_everywhere(data) == expected


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "invalid JSON"),
        (b"[]", "not a JSON object"),
        (b'"model"', "not a JSON object"),
        (b"{}", 'missing "model"'),
        (doc(messages=CHAT), 'missing "model"'),
        (doc(model=None, messages=CHAT), 'missing "model"'),
        (doc(model=7, messages=CHAT), '"model" must be a string, got a number'),
        (doc(model=["m"], messages=CHAT), '"model" must be a string, got an array'),
        (doc(model={"a": 1}, messages=CHAT), '"model" must be a string, got an object'),
        (doc(model=True, messages=CHAT), '"model" must be a string, got a boolean'),
        (doc(model="", messages=CHAT), '"model" is empty'),
        (doc(model=" \t", messages=CHAT), '"model" is empty'),
        (doc(model="m"), 'no "messages", "prompt" or "input"'),
        (doc(model="m", messages="hi"), '"messages" must be an array, got a string'),
        (doc(model="m", messages={"a": 1}), '"messages" must be an array, got an object'),
        (doc(model="m", messages=None), '"messages" must be an array, got null'),
        (doc(model="m", prompt=5), '"prompt" must be a string or an array, got a number'),
        (doc(model="m", input=None), '"input" must be a string or an array, got null'),
        (doc(model="m", input={"a": 1}), '"input" must be a string or an array, got an object'),
        (doc(model="m", prompt=CHAT, stream="yes"), '"stream" must be true or false, got a string'),
        (doc(model="m", prompt="p", stream=1), '"stream" must be true or false, got a number'),
        (b'{"model":"m","prompt":"p",}', "invalid JSON"),
        (b'{"model":"m","prompt":"p"} x', "invalid JSON"),
        (b'{"model":"m","prompt":["p"}', "invalid JSON"),
    ],
)
def test_malformed(data: bytes, reason: str) -> None:
    expected = check_same_everywhere(data)
    assert expected[0] == "malformed"
    assert reason in str(expected[1])
    for how, got in all_scanned(data):
        assert reason in str(got[1]) or reason == "invalid JSON", how


def test_stream_null_means_false() -> None:
    assert check_same_everywhere(doc(model="m", messages=CHAT, stream=None)) == (
        "ok",
        "m",
        Shape.CHAT,
        False,
    )


def test_whitespace_everywhere_and_escapes() -> None:
    data = (
        b' \r\n\t{ \r\n\t"mod\\u0065l" \r\n\t: \r\n\t"a\\\\\\"b" \r\n\t, \r\n\t'
        b'"messages"\t:\t[ { "role":"user", "content" : "\\"\\\\" } ] \r\n\t, '
        b'"stream" :true } \r\n\t'
    )
    assert check_same_everywhere(data) == ("ok", 'a\\"b', Shape.CHAT, True)


def test_nesting_exactly_max_depth_is_fine_everywhere() -> None:
    deep = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    data = b'{"model":"m","prompt":"p","x":' + deep + b"}"
    assert check_same_everywhere(data) == ("ok", "m", Shape.COMPLETION, False)


def test_nesting_beyond_max_depth_is_the_same_everywhere() -> None:
    deep = b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1)
    check_same_everywhere(b'{"model":"m","prompt":"p","x":' + deep + b"}")


def test_nesting_far_beyond_max_depth_is_malformed_everywhere() -> None:
    deep = b"[" * 50_000 + b"]" * 50_000
    expected = check_same_everywhere(b'{"model":"m","prompt":"p","x":' + deep + b"}")
    assert expected[0] == "malformed"


def test_max_members_is_fine_everywhere() -> None:
    fields: dict[str, object] = {f"k{i}": i for i in range(MAX_MEMBERS - 2)}
    data = json.dumps({"model": "m", "prompt": "p", **fields}).encode()
    assert check_same_everywhere(data) == ("ok", "m", Shape.COMPLETION, False)


def test_more_than_max_members_is_the_same_everywhere() -> None:
    fields: dict[str, object] = {f"k{i}": i for i in range(MAX_MEMBERS)}
    check_same_everywhere(json.dumps({"model": "m", "prompt": "p", **fields}).encode())


def test_utf8_bom_is_the_same_everywhere() -> None:
    check_same_everywhere(b"\xef\xbb\xbf" + doc(model="m", prompt="p"))


def test_utf16_body_is_the_same_everywhere() -> None:
    check_same_everywhere(json.dumps({"model": "m", "prompt": "p"}).encode("utf-16-le"))


@pytest.mark.parametrize(
    "data",
    [
        b'{"model":"m","prompt":"p","n":1\x00}',
        b'{"model":\xef\xbb\xbf"m","prompt":"p"}',
        b'{"model":"\x00m\x00"\x00,"prompt":"p"}',
    ],
    ids=["nul-after-value", "bom-before-value", "utf16-value"],
)
def test_value_encoding_is_not_sniffed(data: bytes) -> None:
    check_same_everywhere(data)


# --- a large value -------------------------------------------------------------------------

BLOB = b"QUJD" * (1 << 19)  # 2 MiB of base64, over STRICT_PARSE_BYTES


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            b'{"model":"m","messages":[{"role":"user","content":[{"type":"image_url",'
            b'"image_url":{"url":"data:image/png;base64,' + BLOB + b'"}}]}],"stream":true}',
            ("ok", "m", Shape.CHAT, True),
        ),
        (b'{"prompt":"' + BLOB + b'","model":"m"}', ("ok", "m", Shape.COMPLETION, False)),
        (b'{"prompt":["' + BLOB + b'"],"model":"m"}', ("ok", "m", Shape.COMPLETION, False)),
        (b'{"input":["' + BLOB + b'"],"model":"m"}', ("ok", "m", Shape.EMBEDDINGS, False)),
        (b'{"prompt":{"x":"' + BLOB + b'"},"model":"m"}', ("ok", "m", Shape.RESPONSES, False)),
    ],
    ids=["chat-image", "prompt-string", "prompt-array", "input-array", "prompt-template"],
)
def test_large_value_still_parses_model(data: bytes, expected: Outcome) -> None:
    for size in (None, 65536, 1 << 20, 12_345):
        assert scanned(data, size) == expected
    # Unscanned and over the strict limit: scanned at Pick, same answer.
    assert whole(data) == expected


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b'{"model":"m","messages":"' + BLOB + b'"}', '"messages" must be an array, got a string'),
        (b'{"model":"m","messages":{"a":"' + BLOB + b'"}}', "must be an array, got an object"),
        (b'{"model":"m","input":{"a":"' + BLOB + b'"}}', "got an object"),
        (b'{"model":"m","prompt":"' + BLOB + b'"', "truncated"),
        (b'{"model":"m","prompt":"' + BLOB + b'"} }', "after the top-level object"),
    ],
)
def test_large_value_refusals(data: bytes, reason: str) -> None:
    for size in (None, 65536):
        result = scanned(data, size)
        assert result[0] == "malformed"
        assert reason in str(result[1])


def test_large_value_fields_keep_spans() -> None:
    data = b'{"model":"m","messages":[{"role":"user","content":"' + BLOB + b'"}]}'
    request = parse_request(Body(pieces_of(data, 1 << 20), reserved=len(data)))
    assert isinstance(request.fields.values["messages"], LargeValue)
    assert request.fields.spans["model"].value_end < request.fields.spans["messages"].value_start


# --- random documents ------------------------------------------------------------------------

_CHARS = ["a", "Z", " ", '"', "\\", "/", "\n", "\t", "\x00", "\x1f", "{", "}", "[", "]", ","]
_CHARS += [":", "\u00e9", "\u4e2d", "\U0001f600", "\u2028", "\ud800"]


def random_text(rng: random.Random) -> str:
    return "".join(rng.choice(_CHARS) for _ in range(rng.randrange(0, 10)))


def random_ws(rng: random.Random) -> str:
    return "".join(rng.choice(" \t\r\n") for _ in range(rng.choice([0, 0, 1, 3])))


def random_value(rng: random.Random, depth: int) -> object:
    makers = [
        lambda: random_text(rng),
        lambda: rng.randrange(-(10**20), 10**20),
        lambda: rng.uniform(-1e9, 1e9),
        lambda: rng.choice([True, False]),
        lambda: None,
        lambda: "\\" * rng.randrange(1, 6) + '"',
    ]
    if depth < 4:
        makers += [
            lambda: [random_value(rng, depth + 1) for _ in range(rng.randrange(0, 4))],
            lambda: [random_value(rng, depth + 1) for _ in range(rng.randrange(0, 4))],
            lambda: {
                random_text(rng): random_value(rng, depth + 1) for _ in range(rng.randrange(0, 4))
            },
        ]
    return rng.choice(makers)()


def encode(value: object, rng: random.Random) -> str:
    return json.dumps(
        value,
        ensure_ascii=rng.random() < 0.5,
        separators=(random_ws(rng) + "," + random_ws(rng), random_ws(rng) + ":" + random_ws(rng)),
        indent=rng.choice([None, None, 0, 2, "\t", "\r\n"]),
    )


def random_document(rng: random.Random) -> tuple[bytes, list[str]]:
    """A JSON object text with random members (repeats allowed) and random whitespace."""
    members: list[tuple[str, object]] = []
    for _ in range(rng.randrange(0, 6)):
        members.append((random_text(rng), random_value(rng, 0)))
    if rng.random() < 0.7:
        model = rng.choice(["m", "m", "m", "org/model-7b", "", 3])
        members.insert(rng.randrange(len(members) + 1), ("model", model))
    if rng.random() < 0.7:
        shape = rng.choice(["messages", "prompt", "input"])
        message = {"role": rng.choice(["user", "system"]), "content": random_text(rng)}
        value = rng.choice(
            [[random_value(rng, 1)], random_text(rng), random_value(rng, 1), [message], [message]]
        )
        members.insert(rng.randrange(len(members) + 1), (shape, value))
    if rng.random() < 0.3:
        members.append(("stream", rng.choice([True, False, True, 0])))
    if members and rng.random() < 0.1:
        members.append(rng.choice(members))  # a repeated key
    inner = ("," + random_ws(rng)).join(
        f"{random_ws(rng)}{json.dumps(key)}{random_ws(rng)}:{random_ws(rng)}{encode(value, rng)}"
        for key, value in members
    )
    text = f"{random_ws(rng)}{{{inner}{random_ws(rng)}}}{random_ws(rng)}"
    return text.encode("utf-8", "surrogatepass"), [key for key, _ in members]


def test_random_documents_scan_like_json_loads() -> None:
    rng = random.Random(20240601)
    seen = {"ok": 0, "malformed": 0}
    for _ in range(400):
        data, keys = random_document(rng)
        oracle = json.loads(data)
        assert isinstance(oracle, dict)
        pieces = pieces_of(data, rng.choice([1, 2, 3, 7, 64, None]))
        body = Body(pieces, reserved=len(data))
        scanner = scanner_for(pieces)
        assert scanner.complete, data
        assert [json.loads(data[m.key_start : m.key_end]) for m in scanner.members] == keys
        expected = check_same_everywhere(data)
        seen[str(expected[0])] += 1
        body.observer = scanner
        try:
            request = parse_request(body)
        except MalformedRequest:
            continue
        assert request.fields.values == oracle
    assert min(seen.values()) > 50  # both outcomes are well exercised


def corrupt(data: bytes, rng: random.Random) -> bytes:
    """`data` with one byte replaced, deleted or inserted (NUL and invalid UTF-8 included)."""
    at = rng.randrange(len(data) + 1)
    byte = bytes([rng.choice([*range(128), 0xC3, 0xE9, 0xFF])])
    action = rng.randrange(3) if at < len(data) else 2
    if action == 0:
        return data[:at] + byte + data[at + 1 :]
    if action == 1:
        return data[:at] + data[at + 1 :]
    return data[:at] + byte + data[at:]


def test_corrupted_documents_are_malformed_or_parsed_the_same_everywhere() -> None:
    rng = random.Random(77)
    for _ in range(800):
        data, _ = random_document(rng)
        bad = corrupt(data, rng)
        expected = whole(bad)  # raises nothing but MalformedRequest, or the test fails
        reasons = set()
        for how, got in all_scanned(bad):
            assert kind(got) == kind(expected), f"{how}: {bad!r}: {got} != whole {expected}"
            if how.startswith("chunks"):
                reasons.add(got)
        assert len(reasons) == 1, f"chunking changed the outcome of {bad!r}: {reasons}"


def test_random_json_tokens_agree_everywhere() -> None:
    # Short strings of JSON tokens find structural corner cases fast.
    tokens = [b"{", b"}", b"[", b"]", b'"a"', b":", b",", b"1", b"true", b"null", b" ", b"\n"]
    tokens += [b'"\\""', b'"\\\\"', b'"{"', b"\xc3\xa9", b"1.5e3", b"-"]
    rng = random.Random(5)
    results = {"ok": 0, "malformed": 0}
    for _ in range(2000):
        middle = b"".join(rng.choice(tokens) for _ in range(rng.randrange(0, 7)))
        data = b'{"model":"m","prompt":"p","x":' + middle + b"}"
        expected = whole(data)
        results[str(expected[0])] += 1
        for how, got in all_scanned(data):
            assert kind(got) == kind(expected), f"{how}: {data!r}: {got} != whole {expected}"
    assert min(results.values()) > 100
