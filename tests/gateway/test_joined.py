"""The response head held back for one loop turn, joined to the body's first write."""

from __future__ import annotations

import asyncio
from typing import cast

from kinference.gateway.joined import HeadJoiningTransport


class Recorded:
    """A transport that records what is written to it."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = self.aborted = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def get_extra_info(self, name: str) -> str:
        return f"info {name}"


def joining() -> tuple[HeadJoiningTransport, Recorded]:
    recorded = Recorded()
    transport = cast(asyncio.Transport, recorded)
    return HeadJoiningTransport(transport, asyncio.get_running_loop()), recorded


async def test_the_head_leaves_with_the_first_body_write() -> None:
    joined, recorded = joining()
    joined.hold_next()
    joined.write(b"HEAD")
    assert recorded.writes == []
    joined.write(b"body")
    joined.write(b"more")
    assert recorded.writes == [b"HEADbody", b"more"]
    await asyncio.sleep(0)  # the flush of the loop turn finds nothing held
    assert recorded.writes == [b"HEADbody", b"more"]


async def test_a_head_without_a_body_at_hand_leaves_at_the_end_of_the_loop_turn() -> None:
    joined, recorded = joining()
    joined.hold_next()
    joined.write(b"HEAD")
    await asyncio.sleep(0)
    assert recorded.writes == [b"HEAD"]
    joined.write(b"body")  # only the write after a request's head is held
    assert recorded.writes == [b"HEAD", b"body"]


async def test_close_sends_what_is_held_and_abort_drops_it() -> None:
    joined, recorded = joining()
    joined.hold_next()
    joined.write(b"HEAD")
    joined.close()
    assert recorded.writes == [b"HEAD"] and recorded.closed
    joined, recorded = joining()
    joined.hold_next()
    joined.write(b"HEAD")
    joined.abort()
    await asyncio.sleep(0)
    assert recorded.writes == [] and recorded.aborted
    assert joined.get_extra_info("peername") == "info peername"  # the rest is the transport's
