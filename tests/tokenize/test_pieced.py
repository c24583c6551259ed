"""A chat's messages over 1 MiB are decoded in pieces (`pieced`): the same values and spans
as msgspec's decode of the whole, refused where it refuses, and no decode call reads more
than a piece of JSON text (docs/benchmarks.md, h169: one 1 MiB call held the GIL for 2-10 ms)."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from kinference.bodies import Body
from kinference.requests.parse import parse_request
from kinference.requests.scan import JsonScanner
from kinference.tokenize.history import DecodedHistory
from kinference.tokenize.pieced import _LOOK, PIECE_BYTES, decode_array
from kinference.tokenize.prepare import PromptPreparer
from kinference.tokenize.tokenizer import PromptText, PromptTokenizer
from tests.tokenize.files import WORDS, precise_chat_policy, write_model

KIB = 1024
ODD = ["é", "日本", "😀", '"', "\\", "\n", "\t", "\u2028", "\x01", "/", "\\u", "}", "],"]


def _text(rng: random.Random, chars: int, odd: float = 0.3, lone: bool = False) -> str:
    """Words, and often what JSON escapes, writes as multibyte UTF-8 or as surrogate pairs."""
    extras = [*ODD, "\ud83d", "\ude00"] if lone else ODD
    parts, total = [], 0
    while total < chars:
        part = rng.choice(extras) if rng.random() < odd else rng.choice(WORDS) + " "
        parts.append(part)
        total += len(part)
    return "".join(parts)


def _long(rng: random.Random, low: int = 70 * KIB, high: int = 300 * KIB) -> str:
    return _text(rng, rng.randrange(low, high))


CASES: dict[str, Callable[[random.Random], list[Any]]] = {
    "one huge message": lambda rng: [{"role": "system", "content": _text(rng, 1100 * KIB)}],
    "escapes only": lambda rng: [{"role": "user", "content": '\n\t\\"' * 40_000}],
    "backslash runs": lambda rng: [{"role": "user", "content": "\\" * 90_000 + "x" + "\\" * 7}],
    "surrogate pairs": lambda rng: [{"role": "user", "content": "😀a" * 50_000 + "😀"}],
    "many tiny messages": lambda rng: [
        *({"role": "user", "content": _text(rng, 20)} for _ in range(6000)),
        {"role": "user", "content": _long(rng)},
        *({"role": "assistant", "content": _text(rng, 20)} for _ in range(3000)),
    ],
    "deep content parts": lambda rng: [
        {"role": "user", "content": [{"type": "text", "text": _long(rng)}, {"x": [[_long(rng)]]}]},
        {"role": "tool", "content": [{"type": "text", "n": [1.5, -2, None, True]}], "k": {}},
        {"role": "user", "content": _long(rng)},
    ],
    "strings as elements": lambda rng: [_long(rng), {"role": "user"}, _long(rng), _long(rng)],
    "lone surrogates": lambda rng: [{"role": "user", "content": _text(rng, 200 * KIB, lone=True)}],
}


def _spans(raw: bytes) -> tuple[list[tuple[int, int]], JsonScanner]:
    """The long strings the body scan records in `{"messages": raw}`, as offsets in raw."""
    scanner = JsonScanner()
    scanner.feed(b'{"messages":' + raw + b"}")
    return [(s.start - 12, s.end - 12) for s in scanner.long_strings], scanner


def _whole(raw: bytes) -> tuple[Any, list[tuple[int, int]]] | None:
    try:
        values = msgspec.json.decode(raw)
        items = msgspec.json.decode(raw, type=list[msgspec.Raw])
    except msgspec.MsgspecError:
        return None
    spans, position = [], 0
    for item in items:
        position = raw.index(bytes(item), position)  # each item's own bytes, in order
        spans.append((position, position + len(item)))
        position += len(item)
    return values, spans


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("style", ["ascii", "utf-8", "indent"])
def test_values_and_spans_are_the_whole_decodes(case: str, style: str) -> None:
    messages = CASES[case](random.Random(case))
    dumped = json.dumps(
        messages, ensure_ascii=style == "ascii", indent=2 if style == "indent" else None
    )
    raw = dumped.encode("utf-8", "surrogatepass")  # lone surrogates: invalid UTF-8, or escapes
    strings, _ = _spans(raw)
    decoded, whole = decode_array(raw, strings), _whole(raw)
    if whole is None:  # refused: the caller decodes it as before
        assert decoded is None and (case == "lone surrogates")
        return
    assert decoded is not None and strings
    assert (decoded.values, decoded.spans) == whole


def test_duplicate_keys_and_broken_texts_decode_as_the_whole_does() -> None:
    rng = random.Random(5)
    long, other = json.dumps(_long(rng)), json.dumps(_long(rng))
    raw = f'[{{"content": {long}, "content": {other}, "role": "user"}}]'.encode()
    assert decode_array(raw, _spans(raw)[0]) == decode_array(raw)  # last one wins, as whole
    assert decode_array(raw, _spans(raw)[0]).values == msgspec.json.decode(raw)  # type: ignore[union-attr]
    keyed = f"[{{{long}: 1}}]".encode()  # a long key: given up, the whole decode decides
    assert decode_array(keyed, _spans(keyed)[0]) is None
    for broken in (
        raw[:-1],
        raw.replace(b"user", b"\xff"),
        raw[:100_000] + b"\x01" + raw[100_000:],
    ):
        assert decode_array(broken, _spans(broken)[0]) is None


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The length of the JSON text each msgspec decode call is given."""
    decode, seen = msgspec.json.decode, []

    def counting(raw: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(len(raw))
        return decode(raw, *args, **kwargs)

    monkeypatch.setattr(msgspec.json, "decode", counting)
    yield seen


def test_no_decode_call_reads_more_than_a_piece(reads: list[int]) -> None:
    rng = random.Random(9)
    messages = [
        {"role": "system", "content": _text(rng, 1100 * KIB)},
        {"role": "user", "content": "hi"},
    ]
    span = json.dumps(messages).encode()
    strings, _ = _spans(span)
    body = Body([b'{"messages":' + span + b"}"], reserved=0)
    got = DecodedHistory().messages(
        body, 12, 12 + len(span), [(s + 12, e + 12) for s, e in strings]
    )
    assert got == messages
    assert sum(reads) >= len(span) - 1024 and max(reads) <= PIECE_BYTES + _LOOK + 2


@pytest.fixture
def preparer(tmp_path: Path) -> Iterator[tuple[PromptPreparer, PromptTokenizer]]:
    files = write_model(tmp_path)
    made = PromptPreparer(precise_chat_policy(files, 16), clock=lambda: 0.0)
    yield made, PromptTokenizer.from_files(str(files[0]), str(files[1]), 16)
    made.close()


async def test_a_pick_gets_the_blocks_of_its_messages(
    preparer: tuple[PromptPreparer, PromptTokenizer], reads: list[int]
) -> None:
    rng = random.Random(11)
    messages = [{"role": "system", "content": _text(rng, 1100 * KIB, odd=0.05)}]
    messages.append({"role": "user", "content": _text(rng, 300)})
    raw = json.dumps({"model": "m", "messages": messages}).encode()
    scanner = JsonScanner()
    scanner.feed(raw)
    body = Body([raw[: 1 << 20], raw[1 << 20 :]], reserved=len(raw), observer=scanner)
    query = await asyncio.wait_for(preparer[0].prepare(parse_request(body), body), 30)
    assert query is not None and query.problem is None
    got = query.blocks["default/chat"].blocks
    want = preparer[1].blocks(PromptText(messages=messages)).blocks
    assert got and got == want[: len(got)]
    assert max(reads) <= PIECE_BYTES + _LOOK + 2
