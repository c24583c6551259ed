"""Server-sent events split as bytes arrive, the transform chain, the usage the client asked."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from kinference.gateway import sse
from kinference.gateway.asked import PARSE_LIMIT, UsageAsk
from kinference.gateway.hooks import Chain, PassThrough
from kinference.gateway.sse import (
    MAX_EVENT_BYTES,
    SseEvent,
    SseSplitter,
    encode_event,
    json_object,
)
from kinference.gateway.usage_chunk import HideAddedUsage

STREAM = (
    b'data: {"a": 1}\n\n'
    b'event: message_start\ndata: {"b":\ndata: 2}\n\n'
    b": a comment\n\n"
    b"data: [DONE]\n\n"
)


def split_all(data: bytes, size: int) -> list[SseEvent]:
    splitter = SseSplitter()
    events = []
    for start in range(0, len(data), size):
        events += splitter.feed(data[start : start + size])
    if splitter.leftover:  # a CR last may be half a CRLF: held until the stream says
        assert data.endswith(b"\r") and splitter.leftover == b"data: [DONE]\r\r"
        events += splitter.feed(b"\r")  # what a next event's first line end would settle
    return events


@pytest.mark.parametrize("size", [1, 2, 5, 17, 1000])
@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_events_survive_any_chunking_and_line_ends(size: int, newline: bytes) -> None:
    data = STREAM.replace(b"\n", newline)
    events = split_all(data, size)
    assert [event.json() for event in events] == [{"a": 1}, {"b": 2}, None, None]
    assert [event.name for event in events] == ["", "message_start", "", ""]
    assert events[2].data is None and events[3].done
    assert b"".join(event.raw for event in events).startswith(data)  # forwarded as received


Split = tuple[list[SseEvent], bytes]

MIXED = (
    b'data: {"a": 1}\r\n\r\ndata: 2\n\ndata: 3\r\rdata: 4\r\n\n'
    b"data: 5\n\r\nevent: e\r\ndata: 6\r\n\r\n"
)


@pytest.mark.parametrize("size", range(1, 12))
def test_events_and_leftover_match_the_stream_split_at_once(size: int) -> None:
    """Line ends of every kind, mixed, split across reads at every offset: the events a
    splitter fed piece by piece hands back are those of the whole stream, and so is what
    it holds."""
    whole = SseSplitter()
    expected = [event.raw for event in whole.feed(MIXED + b"data: 7\r\n")]
    for offset in range(size):
        splitter = SseSplitter()
        data = MIXED + b"data: 7\r\n"
        events = splitter.feed(data[:offset])
        for start in range(offset, len(data), size):
            events += splitter.feed(data[start : start + size])
        assert [event.raw for event in events] == expected
        assert splitter.leftover == whole.leftover == b"data: 7\r\n"


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"])
def test_a_long_event_in_small_reads_is_split_once(
    newline: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, each read joined and split the whole event so far (a 2 MiB event in 4 KiB
    reads: 512 splits, 1.4 s of the event loop; 9.4 s with CRLF line ends)."""
    splits: list[int] = []

    def counted(split: Callable[[bytes], Split]) -> Callable[[bytes], Split]:
        def counting(data: bytes) -> Split:
            splits.append(len(data))
            return split(data)

        return counting

    for name in ("_split_lf", "_split_any"):
        monkeypatch.setattr(sse, name, counted(getattr(sse, name)))
    event = (b"data: " + b"x" * 20 + newline) * (2 * 1024 * 1024 // 28) + newline
    splitter, events = SseSplitter(), []
    for start in range(0, len(event), 4096):
        events += splitter.feed(event[start : start + 4096])
    assert [e.raw for e in events] == [event] and len(splits) <= 2


def test_encode_event_round_trips() -> None:
    wire = encode_event(b'{"x":\n1}', "delta")
    (event,) = SseSplitter().feed(wire)
    assert (event.name, event.json()) == ("delta", {"x": 1})


@pytest.mark.parametrize("size", range(1, 12))
def test_forward_sends_every_byte_once_and_only_whole_events_before_the_end(size: int) -> None:
    """What a relay without a transform sends: the stream's bytes exactly, in pieces that
    each end at an event's end (a cut between two of them leaves the client whole events),
    the unended rest with the last read."""
    data = MIXED + b"data: 7\r\n"
    splitter = SseSplitter()
    pieces = []
    for start in range(0, len(data), size):
        splitter.feed(data[start : start + size])
        pieces.append(splitter.forward(start + size >= len(data)))
    assert b"".join(pieces) == data
    sent = b""
    for piece in pieces[:-1]:
        sent += piece
        whole = SseSplitter()
        whole.feed(sent)
        # Nothing after the last whole event; or that event's end, a CR last, held until
        # the next read says whether it is half a CRLF.
        assert whole.leftover in (b"", b"data: 3\r\r"), sent
    assert splitter.leftover == b""


def test_an_endless_event_is_forwarded_as_it_comes() -> None:
    splitter = SseSplitter()
    splitter.feed(b"data: 1\n\ndata: ")
    assert splitter.forward(False) == b"data: 1\n\n"
    splitter.feed(b"x" * MAX_EVENT_BYTES)
    assert splitter.broken and splitter.forward(False) == b"data: " + b"x" * MAX_EVENT_BYTES
    splitter.feed(b"\n\n")
    assert splitter.forward(True) == b"\n\n"


def test_an_endless_event_stops_the_splitting() -> None:
    splitter = SseSplitter()
    assert splitter.feed(b"data: " + b"x" * (MAX_EVENT_BYTES + 1)) == []
    assert splitter.broken and splitter.feed(b"\n\n") == []


class Upper(PassThrough):
    def event(self, event: SseEvent) -> bytes:
        return event.raw.upper()

    def end(self) -> bytes:
        return b"data: end\n\n"


def test_chain_feeds_each_transform_the_output_of_the_one_before() -> None:
    chain = Chain([Upper(), HideAddedUsage()])
    usage = SseSplitter().feed(b'data: {"choices": [], "usage": {"x": 1}}\n\n')[0]
    kept = SseSplitter().feed(b'data: {"choices": [{"t": 1}]}\n\n')[0]
    assert chain.event(kept) == b'DATA: {"CHOICES": [{"T": 1}]}\n\n'
    # Upper changed the keys, so the second transform does not see a usage chunk any more
    assert chain.event(usage) == b'DATA: {"CHOICES": [], "USAGE": {"X": 1}}\n\n'
    assert Chain([HideAddedUsage(), Upper()]).event(usage) == b""
    assert chain.end() == b"data: end\n\n"
    assert chain.headers([("a", "1")]) == [("a", "1")] and chain.status(201) == 201


def asked(*chunks: bytes) -> bool:
    ask = UsageAsk()
    for chunk in chunks:
        ask.feed(chunk)
    return ask.asked()


def test_usage_asked_only_when_the_body_says_so() -> None:
    body = json.dumps({"stream": True, "stream_options": {"include_usage": True}}).encode()
    assert asked(body)
    assert all(asked(body[:cut], body[cut:]) for cut in range(len(body)))  # mark split anywhere
    assert not asked(b'{"stream": true}')
    assert not asked(b'{"stream_options": {"include_usage": false}}')
    assert not asked(b'{"messages": [{"content": "what is include_usage?"}]}')  # only named
    big = b'{"stream_options": {"include_usage": false}, "x": "' + b"y" * PARSE_LIMIT + b'"}'
    assert asked(big)  # too large to parse: nothing hidden that it may have asked for


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"stream_options": {"include_usage": false}, "stream_options": '
         b'{"include_usage": true}}', True),  # the last of a repeated member, as json reads
        (b'{"stream_options": {"include_usage": true, "include_usage": false}}', False),
        (b'{"x": NaN, "stream_options": {"include_usage": true}}', True),  # json.loads reads it
        (b'{"x": "\\ud800", "stream_options": {"include_usage": true}}', True),
        (b'[{"stream_options": {"include_usage": true}}]', False),  # not an object
        (b'{"stream_options": {"include_usage": 1}}', False),  # only true is true
        (b'{"stream_options": {"include_usage": true}', True),  # unreadable: taken as asking
    ],
)  # fmt: skip
def test_usage_asked_reads_what_the_json_module_reads(body: bytes, expected: bool) -> None:
    assert asked(body) is expected
    assert asked(body[:7], body[7:]) is expected


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b'{"a":1,"a":2}', {"a": 2}),
        (b' \n{"a": [1, {"b": null}]} ', {"a": [1, {"b": None}]}),
        (b"[DONE]", None),
        (b"[1, 2]", None),
        (b'"text"', None),
        (b"{not json", None),
        (b'{"a":"\xff"}', None),  # not UTF-8
        # What orjson refuses and the json module reads, read as the json module does.
        (b'{"logprob":-Infinity}', {"logprob": float("-inf")}),
        (b'{"a":"\\ud800"}', {"a": "\ud800"}),
    ],
)
def test_json_object_reads_what_the_json_module_reads(
    payload: bytes, expected: dict[str, object] | None
) -> None:
    assert json_object(payload) == expected
