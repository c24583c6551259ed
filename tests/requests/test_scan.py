"""JsonScanner: member spans and structural errors, whatever the chunking."""

from __future__ import annotations

import json
import pickle

import pytest

from kinference.bodies import Piece
from kinference.requests import JsonScanner
from kinference.requests.spans import LONG_STRING_BYTES, MAX_DEPTH, MAX_MEMBERS
from tests.requests import CHUNKINGS, pieces_of, scanner_for


def scan(data: bytes, size: int | None = None) -> JsonScanner:
    return scanner_for(pieces_of(data, size))


def state(scanner: JsonScanner) -> tuple[object, ...]:
    spans = [(m.key_start, m.key_end, m.value_start, m.value_end) for m in scanner.members]
    return scanner.finish_reason(), scanner.complete, spans, scanner.open_at, scanner.close_at


def scan_everyhow(data: bytes) -> JsonScanner:
    """Scan `data` in every chunking (and split at every single point); all must agree."""
    reference = scan(data)
    for size in CHUNKINGS:
        assert state(scan(data, size)) == state(reference), f"chunks of {size}"
    for cut in range(len(data) + 1):
        two = scanner_for([data[:cut], data[cut:]])
        assert state(two) == state(reference), f"split at {cut}"
    return reference


def test_spans_locate_keys_and_values() -> None:
    data = b' \n{ "model" : "m" ,"n":[1,{"a":"}"}] , "s":"x\\"y"}\t'
    scanner = scan_everyhow(data)
    assert scanner.complete
    assert scanner.finish_reason() is None
    assert scanner.open_at == data.index(b"{")
    assert scanner.close_at == len(data) - 2
    decoded = {}
    for member in scanner.members:
        key = json.loads(data[member.key_start : member.key_end])
        value = json.loads(data[member.value_start : member.value_end])
        assert data[member.value_end] in b",}"
        assert data[member.value_start - 1] == ord(":")
        decoded[key] = value
    assert decoded == {"model": "m", "n": [1, {"a": "}"}], "s": 'x"y'}


def test_empty_object() -> None:
    scanner = scan_everyhow(b"{}")
    assert scanner.complete
    assert scanner.members == []
    assert (scanner.open_at, scanner.close_at) == (0, 1)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "body is empty: expected a JSON object"),
        (b" \r\n\t ", "body is empty: expected a JSON object"),
        (b"[]", "invalid JSON at byte 0: the body is not a JSON object"),
        (b'  "text"', "invalid JSON at byte 2: the body is not a JSON object"),
        (b"42", "invalid JSON at byte 0: the body is not a JSON object"),
        (b"null", "invalid JSON at byte 0: the body is not a JSON object"),
        (b"{", "body ends inside the JSON object (truncated or unbalanced)"),
        (b'{"a":1', "body ends inside the JSON object (truncated or unbalanced)"),
        (b'{"a":"1}', "body ends inside the JSON object (truncated or unbalanced)"),
        (b'{"a":[1,2}', "invalid JSON at byte 9: mismatched bracket"),
        (b'{"a":{"b":1]}', "invalid JSON at byte 11: mismatched bracket"),
        (b'{"a":1]', "invalid JSON at byte 6: unexpected ']'"),
        (b'{"a":1}}', "invalid JSON at byte 7: unexpected data after the top-level object"),
        (b'{"a":1} x', "invalid JSON at byte 8: unexpected data after the top-level object"),
        (b'{"a":1}{}', "invalid JSON at byte 7: unexpected data after the top-level object"),
        (b'{"a":1,}', "invalid JSON at byte 7: unexpected '}'"),
        (b'{,"a":1}', "invalid JSON at byte 1: unexpected ','"),
        (b'{"a":1,,"b":2}', "invalid JSON at byte 7: unexpected ','"),
        (b'{"a" "b":1}', "invalid JSON at byte 5: expected ':' after a key"),
        (b'{"a" x:1}', "invalid JSON at byte 5: expected a quoted key, ':' or '}'"),
        (b"{a:1}", "invalid JSON at byte 1: expected a quoted key, ':' or '}'"),
        (b'{"a":1:2}', "invalid JSON at byte 6: unexpected ':'"),
        (b'{"a"}', "invalid JSON at byte 4: unexpected '}'"),
        (b'{"a":1, x}', "invalid JSON at byte 8: expected a quoted key, ':' or '}'"),
        (b'{{"a":1}}', "invalid JSON at byte 1: unexpected '{'"),
    ],
)
def test_structural_errors(data: bytes, reason: str) -> None:
    scanner = scan_everyhow(data)
    assert not scanner.complete
    assert scanner.finish_reason() == reason


def test_error_is_sticky() -> None:
    scanner = scan(b'{"a":1]')
    reason = scanner.finish_reason()
    scanner.feed(b'}{"b":2}')
    assert scanner.finish_reason() == reason
    assert not scanner.complete


def test_values_are_not_validated_by_the_scanner() -> None:
    # Scalars are checked by the strict parse of each value, not here.
    scanner = scan_everyhow(b'{"a": tru , "b": 1 2, "c": }')
    assert scanner.complete
    assert len(scanner.members) == 3


@pytest.mark.parametrize("run", range(8))
def test_backslash_runs_before_quotes_split_anywhere(run: int) -> None:
    # A value of `run` backslashes then a quote, plus a key with the same: every split
    # point must find exactly the string ends json.loads finds.
    text = "a" + "\\" * run + '"' + "\\" * run + "b"
    data = json.dumps({text: text, "z": "\\" * run}).encode()
    scanner = scan_everyhow(data)
    assert scanner.complete
    keys = [json.loads(data[m.key_start : m.key_end]) for m in scanner.members]
    assert keys == [text, "z"]
    values = [json.loads(data[m.value_start : m.value_end]) for m in scanner.members]
    assert values == [text, "\\" * run]


def test_escaped_quote_split_between_backslashes() -> None:
    # "a\\\"b" : a, escaped backslash, escaped quote, b - split inside the backslash run.
    data = b'{"k":"a\\\\\\"b","m":"x"}'
    assert json.loads(data) == {"k": 'a\\"b', "m": "x"}
    for cut in range(7, 11):
        scanner = scanner_for([data[:cut], data[cut:]])
        assert scanner.complete
        assert [json.loads(data[m.key_start : m.key_end]) for m in scanner.members] == ["k", "m"]
    # Backslashes alone in several chunks in a row.
    scanner = scanner_for([b'{"k":"a', b"\\", b"\\", b"\\", b'"', b'b","m":"x"}'])
    assert scanner.complete
    assert len(scanner.members) == 2


def test_string_opening_at_a_chunk_end() -> None:
    scanner = scanner_for([b'{"k":"', b"\\", b'"', b'"}'])
    assert scanner.complete
    scanner = scanner_for([b'{"k":"', b"\\\\", b'"}'])
    assert scanner.complete


def test_brackets_and_punctuation_inside_strings_are_ignored() -> None:
    data = json.dumps({"a{": "}]", "[b": ["{", ",", ":", '"']}).encode()
    scanner = scan_everyhow(data)
    assert scanner.complete
    assert len(scanner.members) == 2


def test_unicode_is_passed_over_byte_wise() -> None:
    text = "\u00e9\u4e2d\U0001f600 \u2028"
    data = json.dumps({text: [text, {text: text}]}, ensure_ascii=False).encode()
    scanner = scan_everyhow(data)
    assert scanner.complete
    member = scanner.members[0]
    assert json.loads(data[member.key_start : member.key_end]) == text


def test_whitespace_everywhere() -> None:
    data = b' \t\r\n{ \t\r\n"a" \t\r\n: \t\r\n[ 1 , { "b" : 2 } ] \t\r\n, "c":3 \t\r\n} \t\r\n'
    scanner = scan_everyhow(data)
    assert scanner.complete
    assert len(scanner.members) == 2


def test_nesting_up_to_max_depth() -> None:
    ok = b'{"a":' + b"[" * MAX_DEPTH + b"]" * MAX_DEPTH + b"}"
    assert scan(ok).complete
    mixed = b'{"a":' + b'{"x":[' * (MAX_DEPTH // 2) + b"]}" * (MAX_DEPTH // 2) + b"}"
    assert scan(mixed).complete
    too_deep = b'{"a":' + b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1) + b"}"
    for size in CHUNKINGS:
        scanner = scan(too_deep, size)
        assert scanner.finish_reason() == (
            f"invalid JSON at byte {5 + MAX_DEPTH}: nesting deeper than {MAX_DEPTH}"
        )


def test_member_limit() -> None:
    def doc(n: int) -> bytes:
        return json.dumps({f"k{i}": i for i in range(n)}).encode()

    assert scan(doc(MAX_MEMBERS)).complete
    assert len(scan(doc(MAX_MEMBERS)).members) == MAX_MEMBERS
    too_many = doc(MAX_MEMBERS + 1)
    scanner = scan(too_many, 7)
    assert not scanner.complete
    assert f"more than {MAX_MEMBERS} top-level fields" in str(scanner.finish_reason())
    # Nested members do not count.
    assert scan(json.dumps({"a": {f"k{i}": i for i in range(5000)}}).encode()).complete


def test_large_string_in_one_search() -> None:
    blob = b"QUJD" * (1 << 19)  # 2 MiB of base64
    data = b'{"model":"m","messages":[{"content":"' + blob + b'"}],"stream":true}'
    for size in (None, 65536, 1 << 20, 65537):
        scanner = scan(data, size)
        assert scanner.complete
        assert len(scanner.members) == 3
        messages = scanner.members[1]
        assert messages.value_end - messages.value_start > len(blob)


def test_offsets_continue_across_chunks() -> None:
    data = b'   {"a":1}'
    scanner = scan(data, 1)
    assert (scanner.open_at, scanner.close_at) == (3, 9)
    assert (scanner.members[0].key_start, scanner.members[0].key_end) == (4, 7)


# --- long strings ----------------------------------------------------------------------------


def long_strings(scanner: JsonScanner) -> list[tuple[int, int, bool]]:
    return [(s.start, s.end, s.escaped) for s in scanner.long_strings]


@pytest.mark.parametrize("escape_at", [None, 0, 1, 30_000, LONG_STRING_BYTES - 1, 69_998])
def test_long_strings_are_recorded_with_their_escapes(escape_at: int | None) -> None:
    content = bytearray(b"x" * 70_000)
    if escape_at is not None:
        content[escape_at : escape_at + 2] = b"\\n"
    short = b"y" * LONG_STRING_BYTES  # exactly the limit: not recorded
    data = b'{"a":["' + short + b'",{"' + bytes(content) + b'":1}],"b":"z"}'
    start = len(b'{"a":["' + short + b'",{')
    expected = [(start, start + len(content) + 2, escape_at is not None)]
    assert json.loads(data)["b"] == "z"
    for size in (None, 1000, 4096, 65_536, 69_999):
        assert long_strings(scan(data, size)) == expected, size
    assert long_strings(scanner_for(pieces_of(data, 4096, views=True))) == expected
    for cut in range(start - 2, start + 4):  # splits around the opening quote
        assert long_strings(scanner_for([data[:cut], data[cut:]])) == expected
    if escape_at is not None:
        at = start + 1 + escape_at
        for cut in range(at - 1, at + 3):  # splits around the backslash
            assert long_strings(scanner_for([data[:cut], data[cut:]])) == expected


def test_escaped_quotes_in_long_strings_count_as_escapes() -> None:
    data = json.dumps({"k": "a" * 70_000 + '"' + "b" * 10}).encode()
    (string,) = scan(data, 4096).long_strings
    assert string.escaped
    assert json.loads(data[string.start : string.end]) == json.loads(data)["k"]


@pytest.mark.parametrize("chunk", [97, 1 << 20])
def test_a_scan_cut_after_any_event_resumes_exactly(chunk: int) -> None:
    """What the loop scans before its deadline (here: one event), and the worker (a pickled
    copy) scans of the rest, ends in the state of one scan."""
    data = (
        b" " * 70_000 + b'{"a": [1, {"b": "x\\\\"}, []], "s": "' + b"q" * (LONG_STRING_BYTES + 9)
        + b'\\"", "n": [' + b"1," * 70_000 + b'1], "c": {"d": [[], {}]}, "e": "\\\\\\""}'
        + b" " * 70_000
    )  # fmt: skip
    reference = scan(data, chunk)
    scanner = JsonScanner()
    for piece in pieces_of(data, chunk):
        consumed = scanner.feed_until(piece, 0.0)
        if consumed < len(piece):
            copy = pickle.loads(pickle.dumps(scanner))
            copy.feed(piece[consumed:])
            scanner.adopt(copy)
    assert state(scanner) == state(reference)
    assert scanner.long_strings == reference.long_strings


def _strings_and_brackets(value: object) -> tuple[int, int, int]:
    """(strings, their bytes with quotes, '{' and '[') of a value as json.dumps writes it."""
    if isinstance(value, str):
        return 1, len(json.dumps(value)), 0
    children: list[object] = []
    if isinstance(value, dict):
        children = [item for pair in value.items() for item in pair]
    elif isinstance(value, list):
        children = list(value)
    else:
        return 0, 0, 0
    counts = [_strings_and_brackets(child) for child in children]
    return sum(c[0] for c in counts), sum(c[1] for c in counts), 1 + sum(c[2] for c in counts)


def test_nested_strings_and_brackets_are_counted_in_every_chunking() -> None:
    """Below the top level many strings and brackets go in one step; the counts the parse
    cost is estimated from are the same as one event at a time, however the body is cut."""
    document = {
        "model": "m",
        "messages": [
            {"role": "system", "content": 'a "quoted" \\ line\n' * 20},
            {"role": "user", "content": [{"type": "text", "text": "x\\\\"}, {}, []]},
            {"role": "assistant", "content": "\\" * 7 + '"'},
        ],
    }
    data = json.dumps(document).encode()
    expected = _strings_and_brackets(document)
    for size in (None, *CHUNKINGS, 5):
        scanner = scan(data, size)
        assert (scanner.strings, scanner.string_bytes, scanner.brackets) == expected, size
        assert scanner.complete
    scanner = JsonScanner()
    piece = data
    while piece:  # one step at a time, as a loop out of time scans
        piece = piece[scanner.feed_until(piece, 0.0) :]
    assert (scanner.strings, scanner.string_bytes, scanner.brackets) == expected


def message_tails(data: bytes, size: int | None, header: bytes) -> list[Piece]:
    """`data`'s pieces as views of the tails of larger bytes, as `api.framing` keeps a large
    received chunk: `header` before each, here bytes the scan would act on if it read them."""
    return [memoryview(header + bytes(p))[len(header) :] for p in pieces_of(data, size)]


@pytest.mark.parametrize("header", [b"\\", b'"', b'\\"{[', b"\x0a\x80\x80\x40"])
def test_a_view_of_a_message_tail_scans_as_its_bytes(header: bytes) -> None:
    """Such a view is scanned inside its bytes object, from where it starts: the same
    members, long strings, counts and error offsets, whatever lies before it."""
    good = (
        b'{"a": [1, {"b": "x\\\\"}, []], "s": "' + b"q" * (LONG_STRING_BYTES + 9)
        + b'\\"", "e": "\\\\\\"", "n": [' + b"1," * 300 + b"1]}"
    )  # fmt: skip
    for data in (good, good[:-1] + b"]}", b' {"a":1} x'):
        for size in (1, 2, 7, 4096, None):
            reference = scan(data, size)
            scanner = scanner_for(message_tails(data, size, header))
            assert state(scanner) == state(reference), (data[-3:], size)
            assert scanner.long_strings == reference.long_strings
            assert (scanner.strings, scanner.string_bytes) == (
                reference.strings,
                reference.string_bytes,
            )


def test_a_view_of_a_message_tail_is_cut_and_resumed_exactly() -> None:
    data = b'{"s": "' + b"q" * (LONG_STRING_BYTES + 9) + b'", "n": [' + b"1," * 70_000 + b"1]}"
    reference = scan(data, 1 << 20)
    scanner = JsonScanner()
    for piece in message_tails(data, 1 << 20, b"\x0a\x80\x80\x40"):
        consumed = scanner.feed_until(piece, 0.0)
        assert consumed > 0
        if consumed < len(piece):
            scanner.feed(piece[consumed:])
    assert state(scanner) == state(reference)
    assert scanner.long_strings == reference.long_strings
