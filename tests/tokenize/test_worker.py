"""The tokenizer thread: a Pick's work runs before background work queued earlier, background
work is bounded, and a closed thread takes no more."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

import pytest

from kinference.tokenize import worker
from kinference.tokenize.worker import MAX_LATER, TokenizerThread

T = TypeVar("T")


def test_pick_work_runs_before_background_work() -> None:
    thread = TokenizerThread()
    gate, started, order = threading.Event(), threading.Event(), []
    blocker = thread.submit(lambda: started.set() or gate.wait())  # holds the thread
    assert started.wait(timeout=10)
    for index in range(3):
        assert thread.later(lambda index=index: order.append(f"later{index}"))
    urgent = thread.submit(lambda: order.append("pick") or 7)
    assert thread.waiting == 1
    gate.set()
    assert blocker.result(timeout=10) is True and urgent.result(timeout=10) == 7
    done = thread.submit(lambda: None)
    done.result(timeout=10)
    assert order[0] == "pick" and sorted(order[1:]) == ["later0", "later1", "later2"]
    thread.close()


def test_errors_reach_the_waiter_and_background_is_bounded() -> None:
    thread = TokenizerThread()
    with pytest.raises(ZeroDivisionError):
        thread.submit(lambda: 1 / 0).result(timeout=10)
    gate = threading.Event()
    thread.submit(gate.wait)
    accepted = sum(thread.later(lambda: None) for _ in range(MAX_LATER + 10))
    assert accepted == MAX_LATER
    gate.set()
    thread.close()
    assert not thread.later(lambda: None)
    with pytest.raises(RuntimeError):
        thread.submit(lambda: None)


def test_background_work_waits_while_a_pick_is_decided_but_not_forever() -> None:
    now = [0.0]
    thread = TokenizerThread(max_pause_s=1.0, clock=lambda: now[0])
    order: list[str] = []
    ran = threading.Event()
    thread.picking()
    assert thread.later(lambda: order.append("later") or ran.set())
    assert thread.submit(lambda: order.append("pick")).result(timeout=10) is None
    # The thread went past the background slice to the Pick's work, and still holds it.
    assert thread.submit(lambda: order.append("pick2")).result(timeout=10) is None
    assert order == ["pick", "pick2"]
    thread.picked()
    assert ran.wait(timeout=10) and order[-1] == "later"
    # Picks in progress all along: one slice per pause still runs.
    ran.clear()
    thread.picking()
    assert thread.later(ran.set)
    thread.submit(lambda: None).result(timeout=10)
    now[0] += 2.0
    thread.submit(lambda: None).result(timeout=10)  # wakes the thread: the pause is over
    assert ran.wait(timeout=10)
    thread.close()


def test_work_runs_here_only_while_the_thread_is_idle() -> None:
    """`here` runs on the caller's thread when nothing runs or waits on the tokenizer
    thread (its caches are never touched by two threads at once), else answers None."""
    thread = TokenizerThread()
    assert thread.here(threading.get_ident) == (threading.get_ident(),)
    gate, started = threading.Event(), threading.Event()

    def hold() -> bool:
        started.set()
        return gate.wait()

    blocker = thread.submit(hold)
    assert started.wait(timeout=10)
    assert thread.here(lambda: 1) is None  # the thread is running work
    gate.set()
    blocker.result(timeout=10)
    # The thread lets go of its work just after answering the waiter: poll until it has.
    assert _when_idle(thread, threading.get_ident) == (threading.get_ident(),)
    with pytest.raises(ZeroDivisionError):
        thread.here(lambda: 1 / 0)
    assert thread.here(lambda: 2) == (2,)  # the error released it
    thread.close()
    assert thread.here(lambda: 3) is None


def _when_idle(thread: TokenizerThread, work: Callable[[], T]) -> tuple[T] | None:
    deadline = time.monotonic() + 10
    while (done := thread.here(work)) is None and time.monotonic() < deadline:
        time.sleep(0.001)
    return done


def test_here_waits_for_a_background_slice_to_end_not_for_pick_work() -> None:
    """A background slice under way is waited for (up to `here_wait_s`), so that a Pick
    arriving while an earlier prompt is finished does not pay the hand-off; Pick work on
    the thread is not waited for (the Pick's own hand-off is then the shorter way)."""
    thread = TokenizerThread(here_wait_s=60.0)
    gate, started = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        gate.wait()

    assert thread.later(hold)
    assert started.wait(timeout=10)
    releaser = threading.Timer(0.01, gate.set)
    releaser.start()
    assert thread.here(threading.get_ident) == (threading.get_ident(),)
    releaser.join()
    gate.clear()
    started.clear()
    blocker = thread.submit(hold)
    assert started.wait(timeout=10)
    assert thread.here(lambda: 1) is None  # Pick work under way: not waited for
    gate.set()
    blocker.result(timeout=10)
    thread.close()
    impatient = TokenizerThread(here_wait_s=0.0)
    gate.clear()
    started.clear()
    assert impatient.later(hold)
    assert started.wait(timeout=10)
    assert impatient.here(lambda: 1) is None  # no wait allowed
    gate.set()
    impatient.close()


def test_background_work_waits_a_moment_after_the_last_pick(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a Pick is decided the loop sends its request on (`SETTLE_S`): the background
    work only later Picks need waits that long (on main it ran at once)."""
    monkeypatch.setattr(worker, "SETTLE_S", 0.3)
    thread = TokenizerThread(max_pause_s=10.0)
    ran = threading.Event()
    thread.picking()
    assert thread.later(ran.set)
    picked = time.monotonic()
    thread.picked()
    assert ran.wait(timeout=10)
    assert time.monotonic() - picked >= 0.25
    thread.close()


def test_background_work_queued_while_a_pick_is_decided_wakes_the_thread_once_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The thread would only wait again (background work waits for the Pick): queued then,
    it is not woken for it (a wake-up on main) but when the Pick is done (`picked`)."""
    thread = TokenizerThread()
    wakes, ran = [], threading.Event()
    notify = thread._ready.notify
    monkeypatch.setattr(thread._ready, "notify", lambda n=1: wakes.append(n) or notify(n))
    thread.picking()
    assert thread.later(ran.set) and thread.later(lambda: None)
    assert not wakes
    thread.picked()
    assert ran.wait(timeout=10) and len(wakes) == 1
    assert thread.later(lambda: None) and len(wakes) == 2  # no Pick under way: woken
    thread.close()


def test_the_thread_knows_its_own_work_from_work_done_here() -> None:
    thread = TokenizerThread()
    assert thread.submit(thread.current).result(timeout=10) is True
    assert thread.here(thread.current) == (False,)
    thread.close()
