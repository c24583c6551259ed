"""read_fields: whole parse of small unscanned bodies (the scanner-limit pre-count first),
span-by-span for scanned ones."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinference.bodies import Body
from kinference.requests import LargeValue, MalformedRequest, read_fields
from kinference.requests.fields import STRICT_PARSE_BYTES, _may_break_scan_limits
from kinference.requests.spans import MAX_DEPTH, MAX_MEMBERS
from tests.requests import pieces_of, scanner_for

DOC = {"model": "m", "messages": [{"role": "user", "content": "hi \u00e9"}], "n": 2.5}


def scanned_body(data: bytes, size: int | None = 7) -> Body:
    pieces = pieces_of(data, size)
    return Body(pieces, reserved=len(data), observer=scanner_for(pieces))


def test_small_unscanned_body_is_parsed_whole() -> None:
    data = json.dumps(DOC).encode()
    fields = read_fields(Body(pieces_of(data, 5), reserved=len(data)))
    assert fields.values == DOC
    assert fields.spans == {}
    assert (fields.open_at, fields.close_at) == (-1, -1)


def test_scanned_body_is_read_span_by_span() -> None:
    data = b' {"model" : "m", "messages":[{"role":"user","content":"hi \\u00e9"}],"n":2.5}'
    fields = read_fields(scanned_body(data))
    assert fields.values == DOC
    assert list(fields.spans) == ["model", "messages", "n"]
    assert (fields.open_at, fields.close_at) == (1, len(data) - 1)
    span = fields.spans["model"]
    assert data[span.value_start : span.value_end] == b' "m"'


def test_a_scanner_that_did_not_watch_the_upload_is_replaced() -> None:
    data = json.dumps(DOC).encode()

    class Other:
        def feed(self, data: object) -> None:
            pass

    fields = read_fields(Body([data], reserved=len(data), observer=Other()))
    assert fields.values == DOC
    assert list(fields.spans) == list(DOC)


def test_last_repeated_key_wins_both_ways() -> None:
    data = b'{"model":"a","x":1,"model":"b"}'
    assert read_fields(Body([data], reserved=0)).values == {"model": "b", "x": 1}
    fields = read_fields(scanned_body(data))
    assert fields.values == {"model": "b", "x": 1}
    assert data[fields.spans["model"].value_start : fields.spans["model"].value_end] == b'"b"'


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"[]",
        b"nope",
        b'{"a":}',
        b'{"a":1 2}',
        b'{"a":tru}',
        b'{"a":"\\x"}',
        b'{"\\q":1}',
        b'{"a":"tab\there"}',
        b'{"a":"\xff"}',
        b'{"a":[1,]}',
        b'{"a":{"b" 1}}',
        b'{"a":1,}',
    ],
)
def test_malformed_both_ways(data: bytes) -> None:
    with pytest.raises(MalformedRequest):
        read_fields(Body([data] if data else [], reserved=0))
    with pytest.raises(MalformedRequest):
        read_fields(scanned_body(data))


def test_non_object_reason() -> None:
    with pytest.raises(MalformedRequest, match="not a JSON object"):
        read_fields(Body([b"[1]"], reserved=0))


def test_deep_nesting_in_the_whole_parse_is_malformed_not_a_crash() -> None:
    data = b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(MalformedRequest):
        read_fields(Body([data], reserved=0))


def large_doc(blob_bytes: int = 2 << 20) -> tuple[bytes, bytes]:
    blob = b"QUJD" * (blob_bytes // 4)
    head = b'{"model":"m","messages":[{"role":"user","content":"'
    return head + blob + b'"}],"stream":true}', blob


def test_large_value_is_left_unparsed_with_its_span() -> None:
    data, _ = large_doc()
    for size in (65536, 1 << 20, 99_999):
        fields = read_fields(scanned_body(data, size))
        assert fields.values["model"] == "m"
        assert fields.values["stream"] is True
        large = fields.values["messages"]
        assert isinstance(large, LargeValue)
        assert large.first_byte == "["
        span = fields.spans["messages"]
        assert (large.start, large.end) == (span.value_start, span.value_end)
        assert json.loads(data[large.start : large.end])[0]["role"] == "user"


def test_large_unscanned_body_is_scanned_at_pick() -> None:
    data, _ = large_doc()
    fields = read_fields(Body(pieces_of(data, 1 << 20), reserved=len(data)))
    assert isinstance(fields.values["messages"], LargeValue)
    assert fields.values["model"] == "m"


def test_value_at_the_strict_limit_is_still_parsed() -> None:
    # The span counts from just after the colon: `"` + payload + `"` is exactly the limit.
    payload = b"x" * (STRICT_PARSE_BYTES - 2)
    data = b'{"prompt":' + b'"' + payload + b'"' + b',"model":"m"}'
    fields = read_fields(scanned_body(data, 1 << 16))
    assert fields.values["prompt"] == payload.decode()
    data = b'{"prompt": ' + b'"' + payload + b'"' + b',"model":"m"}'
    fields = read_fields(scanned_body(data, 1 << 16))
    assert fields.values["prompt"] == LargeValue(10, 10 + STRICT_PARSE_BYTES + 1, '"')


def test_large_value_type_is_told_after_leading_whitespace() -> None:
    data, _ = large_doc()
    data = data.replace(b'"messages":', b'"messages": \n\t ', 1)
    fields = read_fields(scanned_body(data, 65536))
    assert fields.values["messages"].first_byte == "["


def test_large_value_type_is_told_after_lots_of_whitespace() -> None:
    data, _ = large_doc()
    data = data.replace(b'"messages":', b'"messages":' + b" " * 100, 1)
    fields = read_fields(scanned_body(data, 65536))
    assert fields.values["messages"].first_byte == "["


def test_large_value_is_not_validated() -> None:
    # By design: a value over the strict limit keeps only the scanner's structural check.
    data, _ = large_doc()
    data = data.replace(b'"}]', b'"} ] junk', 1)
    fields = read_fields(scanned_body(data, 65536))
    assert isinstance(fields.values["messages"], LargeValue)


# The scanner-limit pre-count of a body parsed whole: one `translate` pass, then counts,
# answers what three `count` passes over the body answered.


def three_counts(raw: bytes) -> bool:
    """The pre-count as it was: the body counted once per byte value."""
    return raw.count(b"{") + raw.count(b"[") > MAX_DEPTH or raw.count(b":") > MAX_MEMBERS


def near_limits(count: int, of: bytes) -> st.SearchStrategy[bytes]:
    return st.integers(count - 3, count + 3).map(lambda n: of * max(n, 0))


@settings(deadline=None, max_examples=300)
@given(st.binary(max_size=4096))
def test_any_bytes_answer_as_three_counts(raw: bytes) -> None:
    assert _may_break_scan_limits(raw) == three_counts(raw)


@settings(deadline=None, max_examples=300)
@given(
    st.lists(
        st.binary(max_size=64)
        | st.sampled_from([b"{", b"[", b":", b"}", b"]", b'"', b"\\", b"\xff", b"\x00"])
        | near_limits(MAX_DEPTH // 2, b"{")
        | near_limits(MAX_DEPTH // 2, b"[")
        | near_limits(MAX_DEPTH, b"{")
        | near_limits(MAX_MEMBERS, b":"),
        max_size=12,
    ).map(b"".join)
)
def test_bodies_near_the_limits_answer_as_three_counts(raw: bytes) -> None:
    assert _may_break_scan_limits(raw) == three_counts(raw)


def test_the_limits_themselves() -> None:
    depth = b"{" * (MAX_DEPTH // 2) + b"[" * (MAX_DEPTH - MAX_DEPTH // 2)
    assert not _may_break_scan_limits(depth)
    assert _may_break_scan_limits(depth + b"[")
    assert not _may_break_scan_limits(b":" * MAX_MEMBERS)
    assert _may_break_scan_limits(b"x:" * (MAX_MEMBERS + 1))
