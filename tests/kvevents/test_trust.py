"""A worker's trust from its sequence numbers and timing: gaps, restarts, stalls, replays."""

from __future__ import annotations

from kinference.kvevents.trust import Distrust, Step, WorkerTrust


def trust(replay: bool = False) -> WorkerTrust:
    return WorkerTrust(stall_after_s=5.0, resync_after_s=10.0, can_replay=replay)


def test_awaiting_until_batch_zero_then_precise() -> None:
    t = trust()
    assert not t.trusted(0.0) and t.distrust is Distrust.AWAITING
    assert t.on_batch(0, 1.0) is Step.APPLY
    assert t.on_batch(1, 1.1) is Step.APPLY
    assert t.trusted(1.2)


def test_gap_without_replay_resyncs_after_a_while() -> None:
    t = trust()
    t.on_batch(0, 0.0)
    assert t.on_batch(5, 1.0) is Step.APPLY  # 1..4 lost: applied anyway, not trusted
    assert t.distrust is Distrust.GAP and not t.trusted(5.0)
    t.on_batch(6, 6.0)
    assert not t.trusted(10.9)
    assert t.trusted(11.0)


def test_a_second_gap_restarts_the_resync_clock() -> None:
    t = trust()
    t.on_batch(0, 0.0)
    t.on_batch(3, 1.0)
    t.on_batch(9, 8.0)
    assert not t.trusted(12.0) and t.trusted(18.0)


def test_joining_a_running_engine_is_a_gap() -> None:
    t = trust()
    assert t.on_batch(120, 0.0) is Step.APPLY
    assert t.distrust is Distrust.GAP


def test_gap_with_replay_asks_from_the_first_missing() -> None:
    t = trust(replay=True)
    t.on_batch(0, 0.0)
    assert t.on_batch(4, 1.0) is Step.REPLAY
    assert (t.distrust, t.replay_from, t.next_seq) == (Distrust.REPLAYING, 1, 5)
    t.replayed(True, 1.1)
    assert t.trusted(1.1)
    t.on_batch(9, 2.0)
    t.replayed(False, 2.1)  # the buffer no longer had them
    assert t.distrust is Distrust.GAP


def test_sequence_going_back_is_a_restart() -> None:
    t = trust()
    for seq in range(4):
        t.on_batch(seq, 0.0)
    assert t.on_batch(0, 1.0) is Step.RESET_AND_APPLY
    assert t.trusted(1.0)  # a new engine, heard from its first batch on
    t.on_batch(1, 1.1)
    assert t.on_batch(1, 1.2) is Step.RESET_AND_APPLY  # back again, not from 0
    assert t.distrust is Distrust.RESTARTED and not t.trusted(2.0)


def test_a_restart_seen_mid_stream_is_replayed_from_0_when_it_can_be() -> None:
    t = trust(replay=True)
    for seq in range(4):
        t.on_batch(seq, 0.0)
    assert t.on_batch(2, 1.0) is Step.RESET_AND_REPLAY  # the new engine's 0 and 1 missed
    assert t.distrust is Distrust.REPLAYING and t.replay_from == 0
    t.replayed(True, 1.1)
    assert t.trusted(1.1)


def test_malformed_batch_is_a_gap_of_one() -> None:
    t = trust(replay=True)
    t.on_batch(0, 0.0)
    assert t.on_malformed(1, 1.0) is Step.REPLAY and t.replay_from == 1
    t = trust()
    t.on_batch(0, 0.0)
    t.on_malformed(1, 1.0)
    assert t.distrust is Distrust.MALFORMED
    t.on_malformed(None, 2.0)  # not even a sequence number
    assert t.distrust is Distrust.MALFORMED and not t.trusted(11.0) and t.trusted(12.0)


def test_stall_after_a_routed_request_without_events() -> None:
    t = trust()
    t.on_batch(0, 0.0)
    t.routed(1.0)
    t.routed(3.0)  # the first one counts
    assert t.trusted(5.9)
    assert not t.trusted(6.1) and t.distrust is Distrust.STALLED
    t.on_batch(1, 7.0)  # in order: nothing was lost
    assert t.trusted(7.0)


def test_a_publisher_never_heard_from_stalls_once_it_served_a_request() -> None:
    """Before its first request an engine with no events is only awaiting (not DEGRADED);
    once a request that stored blocks there had its first token and nothing came for
    `stall_after_s`, its events are not coming (a wrong port, an engine without KV events,
    a network that drops them): stalled, which Picks report, until its first batch."""
    t = trust()
    assert not t.trusted(100.0) and t.distrust is Distrust.AWAITING
    t.routed(100.0)
    assert t.state(104.0) is Distrust.AWAITING
    assert not t.trusted(105.1) and t.distrust is Distrust.STALLED
    assert t.state(200.0) is Distrust.STALLED
    assert t.on_batch(0, 201.0) is Step.APPLY and t.trusted(201.0)
    late = trust()
    late.routed(0.0)
    assert late.on_batch(7, 6.0) is Step.APPLY and late.distrust is Distrust.GAP  # joined late


def test_no_stall_while_events_keep_coming() -> None:
    t = trust()
    t.on_batch(0, 0.0)
    for second in range(1, 20):
        t.routed(float(second))
        t.on_batch(second, second + 0.5)
    assert t.trusted(20.0)


def lagging(max_lag_s: float = 2.0) -> WorkerTrust:
    t = WorkerTrust(stall_after_s=5.0, resync_after_s=10.0, max_lag_s=max_lag_s)
    t.on_batch(0, 0.0)
    return t


def test_lag_is_measured_without_comparing_clocks() -> None:
    """The engine's clock 1000 s ahead of ours, or behind: only how much longer a batch
    waited than the last current one counts."""
    for skew in (1000.0, -1000.0, 0.0):
        t = lagging()
        t.arrived(10.0 + skew, 10.0, caught_up=True)  # the reference: nothing behind it
        t.on_batch(1, 11.0)
        t.arrived(11.0 + skew, 12.9, caught_up=False)  # waited 1.9 s more
        assert t.trusted(12.9)
        t.on_batch(2, 13.0)
        t.arrived(11.0 + skew, 13.1, caught_up=False)  # 2.1 s more
        assert t.distrust is Distrust.LAGGING and not t.trusted(13.1)
        t.on_batch(3, 14.0)
        t.arrived(12.0 + skew, 14.0, caught_up=True)  # the backlog drained: current
        assert t.trusted(14.0)


def test_a_backlog_lags_until_a_batch_within_the_bound() -> None:
    t = lagging()
    t.arrived(0.0, 0.0, caught_up=True)
    for seq, (ts, now) in enumerate([(1.0, 4.0), (2.0, 4.5), (3.5, 5.0)], 1):
        t.on_batch(seq, now)
        t.arrived(ts, now, caught_up=False)
    assert t.distrust is None  # 3.0, 2.5, then 1.5 s late: trusted again
    t.on_batch(4, 9.0)
    t.arrived(4.0, 9.0, caught_up=False)
    assert t.distrust is Distrust.LAGGING  # 5.0 s late; a stall's next batch does not clear it
    assert t.trusted(100.0) is False


def test_the_first_batch_and_a_restart_take_their_own_reference() -> None:
    t = lagging()
    t.arrived(-50.0, 0.0, caught_up=False)  # the first one seen: the reference, not late
    assert t.trusted(0.0)
    t.on_batch(7, 1.0)  # 1..6 lost: a gap, which lag does not override or clear
    t.arrived(-100.0, 1.0, caught_up=False)
    assert t.distrust is Distrust.GAP
    t = lagging()
    t.arrived(0.0, 0.0, caught_up=True)
    t.on_batch(0, 5.0)  # the engine started over: its stamps may be another clock's
    t.arrived(-100.0, 5.0, caught_up=False)
    assert t.trusted(5.0)


def test_a_join_replay_decides_what_its_batches_make_of_the_worker() -> None:
    """Replaying on subscribing, then: nothing buffered (no events yet); the buffer from
    batch 0 (precise); a buffer cut short or no longer starting at 0 (a gap, its batches
    applied in order; the next live batch past them asks for the rest)."""
    t = trust(replay=True)
    t.joining(1.0)
    assert t.distrust is Distrust.REPLAYING and not t.trusted(1.0)
    t.joined(None, True, 2.0)
    assert t.distrust is Distrust.AWAITING
    t.joined(0, True, 2.0)
    assert [t.on_batch(n, 2.0) for n in range(3)] == [Step.APPLY] * 3 and t.trusted(2.0)
    for first, complete in [(0, False), (5, True)]:
        t = trust(replay=True)
        t.joined(first, complete, 2.0)
        assert t.on_batch(first, 2.0) is Step.APPLY and t.distrust is Distrust.GAP
        assert t.on_batch(first + 4, 2.0) is Step.REPLAY and t.replay_from == first + 1


def test_a_dropped_connection_is_untrusted_until_the_reopened_socket_hears() -> None:
    """ZMQ ended the live connection for good (`kvevents.link`): not trusted, whatever the
    sequence says, until a message comes through the reopened socket; the sequence's own
    state goes on underneath (a gap found meanwhile still asks for a replay)."""
    t = trust(replay=True)
    t.on_batch(0, 0.0)
    t.drop()
    assert not t.trusted(1.0) and t.distrust is Distrust.DROPPED
    assert t.state(1.0) is Distrust.DROPPED and t.stream is None
    t.heard()
    assert t.on_batch(1, 2.0) is Step.APPLY and t.trusted(2.0)  # nothing was missed
    t.drop()
    t.heard()
    assert t.on_batch(4, 3.0) is Step.REPLAY and t.replay_from == 2  # 2 and 3 were
    assert t.distrust is Distrust.REPLAYING
    t.replayed(True, 3.5)
    assert t.trusted(3.5)


def test_a_drop_does_not_end_what_the_sequence_says() -> None:
    t = trust()
    t.on_batch(0, 0.0)
    t.on_batch(5, 1.0)  # a gap, without a replay socket: resynced after 10 s
    t.drop()
    assert not t.trusted(20.0) and t.distrust is Distrust.DROPPED  # dropped, still
    t.heard()
    assert t.trusted(20.0)
    t.on_block_size(21.0)
    t.drop()
    t.heard()
    assert t.distrust is Distrust.BLOCK_SIZE


def test_a_batch_dropped_unread_is_a_gap_from_the_drop() -> None:
    """The socket's queue full, batch 7 is dropped while 3..6 still wait to be applied:
    the worker is not precise from then, through 3..6 in order, until the sequence passes
    7 and shows the gap (replayed here: precise again once it is)."""
    t = trust(replay=True)
    for seq in range(3):
        t.on_batch(seq, 0.0)
    t.overflowed(8)
    t.overflowed(7)
    assert t.distrust is Distrust.GAP and not t.trusted(0.1)
    assert t.state(0.1) is Distrust.GAP
    for seq in range(3, 7):
        assert t.on_batch(seq, 0.2) is Step.APPLY
        assert not t.trusted(100.0)  # no resync clock: the gap is not seen yet
    assert t.on_batch(9, 0.3) is Step.REPLAY
    assert (t.distrust, t.replay_from) == (Distrust.REPLAYING, 7)
    t.replayed(True, 0.4)
    assert t.trusted(0.4)


def test_an_engine_starting_over_ends_what_a_dropped_batch_said() -> None:
    t = trust()
    for seq in range(5):
        t.on_batch(seq, 0.0)
    t.overflowed(9)
    assert t.on_batch(0, 1.0) is Step.RESET_AND_APPLY  # a new process, from its first
    assert t.trusted(1.0)
