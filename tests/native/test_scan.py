"""The C run of the body scan (`kinference.native._scan`) against the pure scanner: the same
members, long strings, counts, stack and failure, over random JSON bodies cut into chunks
at random places (inside escapes, UTF-8 sequences, numbers), fed whole or one step at a
time, and over hostile bodies. The native half skips where the extension is not built,
except that a machine able to build it must have."""

from __future__ import annotations

import itertools
import json
import os
import pickle
import random
import shutil
import sysconfig
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinference.native import load_scan
from kinference.requests.scan import JsonScanner
from kinference.requests.scan_run import pure_run
from kinference.requests.spans import LONG_STRING_BYTES, MAX_DEPTH

Outcome = tuple[object, ...]


def native_built() -> None:
    if load_scan() is None:
        pytest.skip("the C extension kinference.native._scan is not built")


def outcome(scanner: JsonScanner) -> Outcome:
    spans = [(m.key_start, m.key_end, m.value_start, m.value_end) for m in scanner.members]
    counts = (scanner.strings, scanner.string_bytes, scanner.brackets)
    places = (scanner.open_at, scanner.close_at, scanner.complete, bytes(scanner._stack))
    return scanner.finish_reason(), spans, list(scanner.long_strings), counts, places


def scanned(pieces: Sequence[bytes | memoryview], *, native: bool, steps: bool = False) -> Outcome:
    """Fed whole, or (`steps`) one step a call, the rest of a piece fed next as its own."""
    scanner = JsonScanner(native=native)
    assert (scanner._run is not pure_run) == native
    for piece in pieces:
        rest = piece
        while rest:
            taken = scanner.feed_until(rest, float("-inf") if steps else float("inf"))
            assert 0 < taken <= len(rest)
            rest = rest[taken:]
    return outcome(scanner)


def both(pieces: Sequence[bytes | memoryview], *, steps: bool = False) -> Outcome:
    native_built()
    pure = scanned(pieces, native=False, steps=steps)
    assert scanned(pieces, native=True, steps=steps) == pure
    return pure


def cut(data: bytes, points: list[int]) -> list[bytes]:
    edges = sorted({0, len(data), *(p % (len(data) + 1) for p in points)})
    return [data[a:b] for a, b in itertools.pairwise(edges) if b > a]


def test_the_extension_is_built_where_it_can_be() -> None:
    headers = Path(sysconfig.get_paths()["include"], "Python.h").is_file()
    compiler = shutil.which("gcc") or shutil.which("cc")
    if not os.environ.get("CI") and not (compiler and headers):
        pytest.skip("no C compiler or Python headers here: the pure form is expected")
    assert load_scan() is not None, "kinference.native._scan did not build (see setup.py)"


TEXT = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["\\", '"', '\\"', '\\\\"', "é€😀", "{[", "]}", "\u2028"]
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(TEXT, inner, max_size=5),
    max_leaves=40,
)


def spelled(value: object, rng: random.Random) -> bytes:
    """`value` as JSON with random whitespace, escaped or raw UTF-8 text."""
    space = rng.choice(["", " ", "\n\t "])
    text = json.dumps(value, ensure_ascii=rng.random() < 0.5)
    if space:
        text = text.replace(", ", "," + space).replace(": ", ":" + space)
    return text.encode("utf-8", "surrogatepass")


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(TEXT, JSON, max_size=6),
    st.lists(st.integers(0, 10_000), max_size=12),
    st.integers(0, 2**32),
    st.booleans(),
)
def test_random_bodies_in_random_chunks(
    body: dict[str, object], points: list[int], seed: int, steps: bool
) -> None:
    data = spelled(body, random.Random(seed))
    assert both(cut(data, points), steps=steps)[0] is None


@settings(max_examples=200, deadline=None)
@given(
    st.binary(max_size=300) | st.text(alphabet='{}[]"\\:,a é1 ', max_size=300).map(str.encode),
    st.lists(st.integers(0, 400), max_size=10),
    st.booleans(),
    st.booleans(),
)
def test_broken_and_random_bytes(data: bytes, points: list[int], steps: bool, wrap: bool) -> None:
    """Invalid JSON, invalid UTF-8, unbalanced brackets: the same failure, at the same byte."""
    if wrap:
        data = b'{"messages":[' + data
    pieces = cut(data, points)
    both(pieces, steps=steps)
    both([memoryview(bytearray(p)) for p in pieces], steps=steps)


def hostile() -> list[tuple[str, bytes]]:
    turn = b'{"role":"user","content":"hi \\"there\\" \\\\"},'
    return [
        ("deep", b'{"a":' + b"[" * MAX_DEPTH + b"]" * MAX_DEPTH + b"}"),
        ("too deep", b'{"a":' + b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1) + b"}"),
        ("deep objects", b'{"a":' + b'{"b":' * (MAX_DEPTH - 1) + b"1" + b"}" * MAX_DEPTH + b"}"),
        ("many turns", b'{"model":"m","messages":[' + turn * 3000 + b'{"x":1}]}'),
        ("mismatched deep", b'{"a":[[[{]]]}'),
        (
            "long nested",
            b'{"a":["'
            + b"x" * LONG_STRING_BYTES
            + b'","'
            + b"y" * (LONG_STRING_BYTES + 1)
            + b'"]}',
        ),
        ("long escaped", b'{"a":[{"b":"' + b"\\\\" * (LONG_STRING_BYTES // 2) + b'\\""}]}'),
        ("backslash runs", b'{"a":["' + b'\\\\\\"' * 5000 + b'"]}'),
        ("duplicate keys", b'{"a":[1],"a":{"b":[2]},"a":"3"}'),
        ("unclosed nested string", b'{"a":["abc'),
        ("brackets in strings", b'{"a":["}]","[{",{"\\"]":"\\\\"}]}'),
        ("dense window", b'{"a":' + b"[1," * 30_000 + b"2" + b"]" * 30_000 + b"}"),
    ]


@pytest.mark.parametrize(("name", "data"), hostile(), ids=[name for name, _ in hostile()])
def test_hostile_bodies(name: str, data: bytes) -> None:
    rng = random.Random(name)
    for size in (None, 1, 2, 3, 7, 4096, 65536):
        pieces = cut(data, list(range(0, len(data), size)) if size else [])
        if size == 1 and len(data) > 20_000:
            continue  # covered by the random cuts below at lower cost
        both(pieces)
    for _ in range(5):
        both(cut(data, [rng.randrange(len(data) + 1) for _ in range(rng.randrange(1, 40))]))
    both(cut(data, [rng.randrange(len(data) + 1) for _ in range(8)]), steps=True)


def test_many_tiny_chunks_of_a_chat() -> None:
    data = json.dumps({"model": "m", "messages": [{"role": "user", "content": 'a\\"é'}] * 40})
    both([bytes([byte]) for byte in data.encode()])
    both([memoryview(bytearray([byte])) for byte in data.encode()], steps=True)


def test_a_native_scanner_goes_to_the_worker_and_back() -> None:
    """The parse worker gets the scanner pickled and returns it (`Offload.observe`)."""
    native_built()
    data = b'{"model":"m","messages":[' + b'{"a":"b"},' * 100 + b'{}],"x":1}'
    first = JsonScanner()
    first.feed(data[:333])
    copy = pickle.loads(pickle.dumps(first))
    copy.feed(data[333:])
    first.adopt(copy)
    assert first._run is load_scan()
    assert outcome(first) == scanned([data], native=False)


def test_bad_arguments_are_refused() -> None:
    native_built()
    run = load_scan()
    assert run is not None
    with pytest.raises(TypeError):
        run(b"[]", 0, 2, b"[", MAX_DEPTH, 10)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="len"):
        run(b"[]", 0, 3, bytearray(b"["), MAX_DEPTH, 10)
    with pytest.raises(ValueError, match="len"):
        run(b"[]", 2, 1, bytearray(b"["), MAX_DEPTH, 10)
    with pytest.raises(ValueError):
        run(b"[]", -1, 1, bytearray(b"["), MAX_DEPTH, 10)
    with pytest.raises(ValueError, match="deeper"):
        run(b"]", 0, 1, bytearray(b"[["), 1, 10)
    with pytest.raises(ValueError, match="only"):
        run(b"]", 0, 1, bytearray(b"x"), MAX_DEPTH, 10)
    assert run(object(), 0, 0, bytearray(b"["), MAX_DEPTH, 10) == (0, 0, 0, 0)  # type: ignore[arg-type]
    stack = bytearray(b"[")
    assert run(b'"a\\"b"]', 0, 7, stack, MAX_DEPTH, 10) == (7, 1, 6, 0)
    assert stack == b""
