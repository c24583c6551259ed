"""Body and response ids: random, non-zero, never one that is still in use, one OS read
for many."""

from __future__ import annotations

import itertools
import os
import struct
import sys
import threading
from collections.abc import Iterator

import pytest

from kinference.bodies import ids
from kinference.bodies.ids import IdSource


def test_ids_are_non_zero_distinct_and_not_sequential() -> None:
    source = IdSource()
    drawn = [source.new_id(()) for _ in range(2000)]  # several reads of 512
    assert all(0 < value < 1 << 64 for value in drawn)
    assert len(set(drawn)) == len(drawn)
    steps = {b - a for a, b in itertools.pairwise(drawn)}
    assert len(steps) > 1000  # a counter would show one step over and over
    assert max(drawn).bit_length() > 60  # spread over the whole 64-bit space


def _reads(monkeypatch: pytest.MonkeyPatch, words: list[int]) -> list[int]:
    """os.urandom answering `words` (8 bytes each, in pop order), 2 a read; the sizes read."""
    pending: Iterator[int] = iter(words)
    sizes: list[int] = []

    def urandom(size: int) -> bytes:
        sizes.append(size)
        taken = [next(pending) for _ in range(size // 8)]
        return struct.pack(f"={len(taken)}Q", *reversed(taken))  # popped from the end

    monkeypatch.setattr(ids.os, "urandom", urandom)
    return sizes


def test_zero_and_ids_in_use_are_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = _reads(monkeypatch, [0, 7, 0, 7, 42, 9])
    source = IdSource(draw_bytes=16)
    assert source.new_id({7}) == 42  # three reads of two ids: 0 and 7 twice, then 42
    assert sizes == [16, 16, 16]
    assert source.new_id({7}) == 9  # the rest of the last read, no read of its own
    assert sizes == [16, 16, 16]


def test_one_read_serves_many_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    sizes: list[int] = []
    real = os.urandom

    def urandom(size: int) -> bytes:
        sizes.append(size)
        return real(size)

    monkeypatch.setattr(ids.os, "urandom", urandom)
    source = IdSource()
    drawn = {source.new_id(()) for _ in range(ids.DRAW_BYTES // 8 + 1)}
    assert len(drawn) == ids.DRAW_BYTES // 8 + 1
    assert sizes == [ids.DRAW_BYTES, ids.DRAW_BYTES]  # 512 ids a read
    assert source.buffered == ids.DRAW_BYTES // 8 - 1


def test_sources_do_not_share_a_read() -> None:
    first, second = IdSource(), IdSource()
    assert {first.new_id(()) for _ in range(100)}.isdisjoint(second.new_id(()) for _ in range(100))


def test_concurrent_callers_never_get_the_same_id() -> None:
    source = IdSource(draw_bytes=64)  # 8 ids a read: reads race with pops
    per_thread, threads = 4000, 8
    drawn: list[list[int]] = [[] for _ in range(threads)]
    start = threading.Barrier(threads)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter allows
    try:

        def draw(into: list[int]) -> None:
            start.wait()
            into.extend(source.new_id(()) for _ in range(per_thread))

        workers = [threading.Thread(target=draw, args=(into,)) for into in drawn]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        sys.setswitchinterval(interval)
    every = [value for into in drawn for value in into]
    assert len(every) == per_thread * threads
    assert len(set(every)) == len(every)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_hand_out_its_parents_ids() -> None:
    source = IdSource()
    source.new_id(())
    assert source.buffered > 0
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what it would hand out, then leave at once
        try:
            os.write(write, struct.pack("=QQ", source.buffered, source.new_id(())))
        finally:
            os._exit(0)
    os.close(write)
    try:
        buffered, child_id = struct.unpack("=QQ", os.read(read, 16))
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert buffered == 0  # forgotten at the fork
    parents = {source.new_id(()) for _ in range(ids.DRAW_BYTES // 8)}
    assert child_id not in parents


def test_draw_bytes_must_be_whole_ids() -> None:
    for bad in (0, 4, 12):
        with pytest.raises(ValueError, match="multiple of 8"):
            IdSource(draw_bytes=bad)
