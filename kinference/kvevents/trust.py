"""Whether one worker's event stream can be trusted, from its sequence numbers and timing.

The publisher numbers its batches 0, 1, 2, ... A worker's index is precise while every batch
since the first has been seen, in order. What breaks that, and what mends it:

- a **gap** (a batch skipped: the subscriber fell behind, the connection dropped, we joined
  a running engine): with a replay socket the missed batches are asked for and the worker is
  precise again once they are applied; without one, after `resync_after_s` of gap-free
  events (blocks we never heard of are then likely evicted, and those we know are right);
- a **restart** (the sequence goes back: a new engine process): its index is cleared, and
  it is precise again from that batch on if it is batch 0, else once the new process's
  batches from 0 are replayed, or without a replay socket after `resync_after_s`;
- a **malformed** batch: as a gap of one batch (replayed if possible);
- a **stall**: a request that had to store blocks there produced its first token, and
  nothing was published for `stall_after_s` since (whether or not anything was before):
  not precise until the next batch;
- **blocks of another size** than the pool's `block_size` (a misconfiguration: none of them
  can match a prompt cut in the pool's blocks): not precise until the engine starts over;
- an **overflow**: a batch dropped unread, the socket's queue full (`kvevents.link`): not
  precise from the drop, before the batches queued ahead of it bring the sequence to the
  gap, which then goes as any gap;
- a **dropped** connection: ZMQ ended the live socket's session for good (a frame over its
  size cap, a protocol error; `kvevents.link`): not precise until a message comes through
  the reopened socket, whose sequence then says what was missed. Kept apart from the
  sequence's state (`stream`), which goes on as before underneath;
- **lagging**: the subscriber applies batches more than `max_lag_s` after it could have
  (it falls behind a flooding publisher, its loop is starved): not precise until a batch
  comes within the bound again. Measured without comparing the two hosts' clocks: a batch
  taken from the socket with none waiting behind it is current (the view is up to date
  once it is applied), and its `receipt - ts` (local clock minus the engine's stamp: their
  skew plus the network's delay) is the reference; a batch taken with others waiting
  behind it lags by how much its `receipt - ts` exceeds the least one since the last
  current batch. The skew cancels; what remains is how much longer it waited than a
  batch that did not wait (clock drift over a backlog's seconds is negligible, and a clock
  step is forgotten at the next current batch).

An engine that has published nothing yet (`AWAITING`) is not precise either, but that is
its normal state before its first request, so it does not make a Pick DEGRADED; once a
request that stored blocks there had its first token and nothing came for `stall_after_s`,
its events are not coming (a wrong address, an engine without KV events, a network that
drops them): `STALLED`, as a trusted worker's silence is.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass


class Distrust(enum.Enum):
    """Why a worker's events are not trusted now; the value is the text reasons quote."""

    AWAITING = "no events yet"
    GAP = "sequence gap"
    REPLAYING = "replaying missed events"
    RESTARTED = "engine restarted mid-stream"
    MALFORMED = "malformed event batch"
    STALLED = "publisher stalled"
    BLOCK_SIZE = "block size differs from the pool's"
    LAGGING = "events applied late"
    DROPPED = "event connection dropped"  # a frame over the cap or a protocol error


_RESYNCING = (Distrust.GAP, Distrust.MALFORMED, Distrust.RESTARTED)  # end after resync_after_s
_STALLS = (None, Distrust.AWAITING)  # what a routed request's silence makes STALLED


class Step(enum.Enum):
    """What to do with a batch that just arrived."""

    APPLY = "apply"
    RESET_AND_APPLY = "reset_and_apply"  # clear the worker's index first
    REPLAY = "replay"  # apply it after asking for the missing ones from `replay_from`
    RESET_AND_REPLAY = "reset_and_replay"  # both: a restarted engine's first batches missed


@dataclass
class WorkerTrust:
    """One worker's stream state; times are monotonic seconds."""

    stall_after_s: float
    resync_after_s: float
    can_replay: bool = False
    max_lag_s: float = math.inf  # a live batch applied this much later than it could be
    next_seq: int | None = None  # the batch expected next; None before the first
    stream: Distrust | None = Distrust.AWAITING  # what the sequence says (`distrust`)
    since: float = 0.0  # when `stream` began
    dropped: bool = False  # the live socket was reopened and has not heard anything yet
    waiting_since: float | None = None  # first routed request not yet followed by a batch
    replay_from: int = 0
    overflowed_at: int | None = None  # first batch dropped unread, until the sequence passes it
    base: float | None = None  # least `receipt - ts` since the last current batch

    @property
    def distrust(self) -> Distrust | None:
        """Why the worker is not trusted (as last checked), None if it is: its connection
        dropped, else what its sequence says (a batch dropped unread: a gap)."""
        return Distrust.DROPPED if self.dropped else self._or_overflow(self.stream)

    def trusted(self, now: float) -> bool:
        self.check(now)
        return self.distrust is None

    def on_batch(self, seq: int, now: float) -> Step:
        expected, self.next_seq = self.next_seq, seq + 1
        self._passed(seq, expected)
        self.waiting_since = None
        if self.stream is Distrust.STALLED:
            self.stream = None
        if expected is None:
            return self._first(seq, now)
        if seq == expected:
            return Step.APPLY
        if seq < expected:  # a PUB socket never repeats: the publisher started over
            self.base = None  # a new process: its stamps may come from another clock
            if seq == 0:
                self.stream = None
            elif self.can_replay:  # the new process's batches before this one
                self.stream, self.since, self.replay_from = Distrust.REPLAYING, now, 0
                return Step.RESET_AND_REPLAY
            else:
                self._lost(Distrust.RESTARTED, now, 0)
            return Step.RESET_AND_APPLY
        return self._gap(Distrust.GAP, now, expected)

    def on_malformed(self, seq: int | None, now: float) -> Step:
        if seq is not None:
            expected, self.next_seq = self.next_seq, seq + 1
            self._passed(seq, expected)
            return self._gap(Distrust.MALFORMED, now, seq if expected is None else expected)
        self._lost(Distrust.MALFORMED, now, 0)
        return Step.APPLY

    def arrived(self, ts: float, now: float, caught_up: bool) -> None:
        """A live batch stamped `ts` by the engine was taken from the socket at `now`
        (after `on_batch`); `caught_up`: no other message waited behind it."""
        offset = now - ts
        if caught_up or self.base is None:
            self.base = offset
        else:
            self.base = min(self.base, offset)
        lagging = offset - self.base > self.max_lag_s
        if lagging and self.stream is None:
            self.stream, self.since = Distrust.LAGGING, now
        elif not lagging and self.stream is Distrust.LAGGING:
            self.stream = None

    def on_block_size(self, now: float) -> None:
        """The batch stored blocks of another size than the pool's (it is not applied)."""
        self.stream, self.since = Distrust.BLOCK_SIZE, now

    def replayed(self, complete: bool, now: float) -> None:
        """The replay ended: every missed batch came back (`complete`), or not."""
        if self.stream is Distrust.REPLAYING:
            if complete:
                self.stream = None
            else:
                self.stream, self.since = Distrust.GAP, now

    def joining(self, now: float) -> None:
        """The engine's buffer is asked for on subscribing: it may hold warm blocks not
        known yet (REPLAYING, not AWAITING: not taken as holding nothing)."""
        self.stream, self.since = Distrust.REPLAYING, now

    def joined(self, first: int | None, complete: bool, now: float) -> None:
        """The join replay ended: `first`, the oldest batch it brought (None: none), and
        whether it brought all the engine buffered. The batches it brought then go through
        `on_batch` in order: from batch 0 the worker is precise; a buffer no longer starting
        at 0 (batches before `first` are gone for good) or cut short is a gap (the next live
        batch asks for the rest), trusted again after `resync_after_s`."""
        self.next_seq = first
        if first is None and complete:
            self.stream = Distrust.AWAITING  # the engine published nothing yet
        elif first == 0 and complete:
            self.stream = None
        else:
            self.stream, self.since, self.replay_from = Distrust.GAP, now, first or 0

    def routed(self, now: float) -> None:
        """A request that stored new blocks was run by this worker (its first token came)."""
        if self.waiting_since is None:
            self.waiting_since = now

    def overflowed(self, seq: int) -> None:
        """Batch `seq` was dropped unread (`kvevents.link`): a gap from now, not only once
        the batches queued ahead of it are applied and the sequence shows it."""
        at = self.overflowed_at
        self.overflowed_at = seq if at is None else min(at, seq)

    def _passed(self, seq: int, expected: int | None) -> None:
        """Batch `seq` goes through the sequence: past the one dropped unread, its gap is
        the sequence's to see (or, the sequence going back, the engine started over)."""
        at = self.overflowed_at
        if at is not None and (seq >= at or (expected is not None and seq < expected)):
            self.overflowed_at = None

    def _or_overflow(self, stream: Distrust | None) -> Distrust | None:
        return Distrust.GAP if stream is None and self.overflowed_at is not None else stream

    def drop(self) -> None:
        """ZMQ ended the live connection for good (a frame over the size cap, a protocol
        error) and the socket is being reopened: batches published meanwhile are lost, and
        nothing says so until a message comes through the new socket (`heard`)."""
        self.dropped = True

    def heard(self) -> None:
        """A message came through the live socket: connected (what it missed meanwhile
        is a gap in the sequence, seen as this message goes through `on_batch`)."""
        self.dropped = False

    def check(self, now: float) -> None:
        state = self._stream_state(now)
        if state is not self.stream:
            if state is Distrust.STALLED:
                self.since = now
            self.stream = state

    def state(self, now: float) -> Distrust | None:
        """What `check` makes `distrust` at `now`, without writing it: for readers on
        other threads (the metrics server's), which must not undo what the loop writes."""
        return Distrust.DROPPED if self.dropped else self._or_overflow(self._stream_state(now))

    def _stream_state(self, now: float) -> Distrust | None:
        distrust, since, waiting = self.stream, self.since, self.waiting_since
        if waiting is not None and now - waiting > self.stall_after_s and distrust in _STALLS:
            return Distrust.STALLED
        if distrust in _RESYNCING and now - since >= self.resync_after_s:
            return None
        return distrust

    def _first(self, seq: int, now: float) -> Step:
        if seq == 0:
            self.stream = None
            return Step.APPLY
        return self._gap(Distrust.GAP, now, 0)  # joined a running engine

    def _gap(self, why: Distrust, now: float, missing_from: int) -> Step:
        if self.can_replay:
            self.stream, self.since, self.replay_from = Distrust.REPLAYING, now, missing_from
            return Step.REPLAY
        self._lost(why, now, missing_from)
        return Step.APPLY

    def _lost(self, why: Distrust, now: float, missing_from: int) -> None:
        self.stream, self.since, self.replay_from = why, now, missing_from
