"""The wait before reopening a socket ZMQ gave up on."""

from __future__ import annotations

from kinference.kvevents.link import REOPEN_FIRST_S, REOPEN_MAX_S, Backoff


def test_the_wait_doubles_while_drops_come_quickly_and_is_bounded() -> None:
    now = [0.0]
    backoff = Backoff("e0", clock=lambda: now[0])
    waits = []
    for _ in range(10):
        now[0] += 1.0  # each socket lasts 1 s
        waits.append(backoff.delay())
        now[0] += waits[-1]
    assert waits[:3] == [REOPEN_FIRST_S, 2 * REOPEN_FIRST_S, 4 * REOPEN_FIRST_S]
    assert max(waits) == waits[-1] == REOPEN_MAX_S


def test_a_socket_that_lasted_starts_the_wait_again_from_the_first() -> None:
    now = [0.0]
    backoff = Backoff("e0", clock=lambda: now[0])
    for _ in range(5):
        now[0] += backoff.delay()
    now[0] += REOPEN_MAX_S
    assert backoff.delay() == REOPEN_FIRST_S
