"""Tokenizations under way in the background, which later Picks leave shared text to.

A Pick tokenizes its prompt only until no worker holds it further, within its bounds, and
leaves the rest to the background (`lazy`, `prepare`). When 16 conversations on one new
long system prompt send their first turns together, the first one's engine stores the
whole prompt as soon as it ran it, so every later Pick found each block held and walked on
into the system prompt until its time was up: each one tokenized the next few KiB of it
on its own path (relaying through the marks the one before left), ~3-5 ms of the tokenizer
thread per Pick, which the next Pick queued behind, while the first one's rest, which
tokenizes that same text anyway, waited for the Picks to end (docs/benchmarks.md, h176).

So a tokenization whose rest is queued is *in flight* here until its rest ends (done, or
dropped), by lineage (`turns`: its text's first characters). A Pick whose walk would go on
(every block so far held somewhere) into at least `AHEAD_CHARS` of text that an in-flight
tokenization shares with it (the same characters up to there) leaves that text to it, as
if its time were up: it takes the furthest mark left into its text (`turns`) and stops,
its prediction a floor (`PromptBlocks.bounded`: the approximate index's count for workers
whose run reaches its last block). Its own rest, queued after, catches up from the marks
the other one leaves (`Tokenization.catch_up`): the shared text is tokenized once, in the
background. A walk whose text diverges from every flight's within `AHEAD_CHARS` tokenizes
its own text as before (a short shared stretch costs less than the floor's imprecision).
A flight whose rest is dropped or that finished is gone: nothing waits for it (followers'
rests tokenize what no mark covers themselves); a Pick never waits for a flight.

Bounded: `MAX_PER_LINEAGE` flights a lineage (the oldest forgotten first: a Pick then
walks), each a reference to a tokenization its queued rest holds anyway. Used from the
tokenizer's one thread (or with its work lock held).
"""

from __future__ import annotations

from typing import Protocol

from kinference.tokenize.pieces import CHECK_CHARS

# Shared text ahead of a Pick's walk that it leaves to a flight: more than its bounds
# would let it walk (`prepare.INLINE_CHARS` on the loop, ~3 ms on the thread).
AHEAD_CHARS = 4 * 1024
MAX_PER_LINEAGE = 16


class Flight(Protocol):
    @property
    def text(self) -> str: ...

    @property
    def lineage(self) -> bytes: ...

    @property
    def done(self) -> bool: ...

    @property
    def position(self) -> int: ...


class Flights:
    """In-flight tokenizations by lineage (digest of their text's start, `turns`)."""

    def __init__(self, max_per_lineage: int = MAX_PER_LINEAGE) -> None:
        self.max_per_lineage = max_per_lineage
        self._lineages: dict[bytes, list[Flight]] = {}
        self.deferred = 0  # Pick walks left to a flight (a counter for tests and traces)

    def __len__(self) -> int:
        return sum(map(len, self._lineages.values()))

    def add(self, flight: Flight) -> None:
        flights = self._lineages.setdefault(flight.lineage, [])
        if flight in flights:
            return
        flights.append(flight)
        if len(flights) > self.max_per_lineage:
            del flights[0]

    def remove(self, flight: Flight) -> None:
        flights = self._lineages.get(flight.lineage)
        if flights is None:
            return
        if flight in flights:
            flights.remove(flight)
        if not flights:
            del self._lineages[flight.lineage]

    def ahead(self, asking: Flight) -> bool:
        """Whether another unfinished flight's text is `asking`'s up to `AHEAD_CHARS` past
        its position (nothing before that, less `CHECK_CHARS`, depends on what follows:
        the cuts and tokens there are the same in both)."""
        text, end = asking.text, asking.position + AHEAD_CHARS
        if end > len(text):
            return False
        window = slice(max(end - CHECK_CHARS, 0), end)
        for flight in self._lineages.get(asking.lineage, ()):
            other = flight.text
            if flight is asking or flight.done or len(other) < end:
                continue
            if other is text or (other[window] == text[window] and other.startswith(text[:end])):
                return True
        return False
