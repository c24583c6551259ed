"""Stream entries: binary hashes in pool shards, base64 in the global stream, and entries
whose hashes do not add up refused rather than misapplied."""

from __future__ import annotations

from typing import Any

from kinference.cluster import codec

HASHES = [1, 2**63 + 5, 42]


def _fields(encoded: dict[str, Any]) -> dict[bytes, bytes]:
    """As redis-py returns them: bytes names and values."""
    return {k.encode(): v if isinstance(v, bytes) else str(v).encode() for k, v in encoded.items()}


def events() -> list[list[Any]]:
    return [
        [codec.PICKED, "10.0.0.1:8000", "m", codec.hash_bytes(HASHES)],
        [codec.RELEASED, "10.0.0.1:8000"],
        [codec.PICKED, "10.0.0.2:8000", "m", codec.hash_bytes(HASHES[:1])],
    ]


def test_binary_and_base64_entries_decode_to_the_same_hashes() -> None:
    for binary in (True, False):
        encoded = codec.encode("a", 3, events(), binary=binary)
        assert ("h" in encoded) is binary
        entry = codec.decode(b"1-0", _fields(encoded))
        assert entry is not None and entry.seq == 3
        assert codec.unpack_hashes(entry.events[0][3]) == tuple(HASHES)
        assert codec.unpack_hashes(entry.events[2][3]) == (HASHES[0],)


def test_binary_is_smaller_than_base64() -> None:
    def size(binary: bool) -> int:
        encoded = codec.encode("a", 3, events(), binary=binary)
        return sum(len(v) for v in _fields(encoded).values())

    assert size(True) < size(False)


def test_an_entry_whose_hash_counts_do_not_match_its_blob_is_refused() -> None:
    fields = _fields(codec.encode("a", 3, events(), binary=True))
    assert codec.decode(b"1-0", {**fields, b"h": fields[b"h"][:-8]}) is None
    assert codec.decode(b"1-0", {**fields, b"h": fields[b"h"] + b"\0" * 8}) is None
    bad = {**fields, b"e": b'[["p","10.0.0.1:8000","m",-1]]'}
    assert codec.decode(b"1-0", bad) is None
