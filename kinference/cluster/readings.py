"""Which of the scrape leader's engine readings go on the stream, and when.

The leader scrapes each engine every `interval_s` (0.2 s by default). Sending every reading
costs one flush (a pipeline and a stream entry) per scrape, and every replica a read, even
when nothing changed: an idle pool of 4 engines was 16 flushes a second, most of a replica's
idle CPU with Redis. A reading now goes out at once when it differs from the last one sent
for that endpoint (readiness, a failed scrape, any metric); an unchanged one only once the
last one sent is `refresh_s` old, so that the other replicas' copy never goes stale:

    refresh_s = min((stale_after_s - interval_s) / 2,
                    stale_after_s - interval_s * (1 + SCRAPE_JITTER) - timeout_s - SLACK_S)

After a reading withheld, the next comes at most an interval (and its jitter) plus a scrape's
timeout later (the next scrape starts an interval after this one began, and may answer just
inside its timeout), so a copy there is at most refresh_s + that old (plus the flush's batch
window and the stream's delay, `SLACK_S`) when the next arrives: inside `stale_after_s`.
When one reading goes out, the others due
within half a refresh go with it (stamped with their own scrape's time), so an idle pool's
readings travel together, one flush per refresh rather than one per endpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kinference.workers.scrape import JITTER as SCRAPE_JITTER

FORGET_S = 60.0  # seconds: an endpoint not scraped this long is forgotten (pods come and go)
SLACK_S = 0.05  # seconds: the flush's batch window (15 ms) and the stream's delay, at most
Reading = Mapping[str, Any]  # the reading's content, without its time ("at") or sender


def refresh_after(stale_after_s: float, interval_s: float, timeout_s: float) -> float:
    """Seconds after which an unchanged reading is sent again (0: every reading is sent)."""
    late = interval_s * (1 + SCRAPE_JITTER) + timeout_s + SLACK_S  # the next reading, at most
    return max(min((stale_after_s - interval_s) / 2, stale_after_s - late), 0.0)


class ReadingThrottle:
    """Decides, per scrape, which endpoints' readings to send: (endpoint, reading, at)."""

    def __init__(self, wall: Callable[[], float]) -> None:
        self._wall = wall
        self._latest: dict[str, tuple[Reading, float]] = {}  # the last scrape, its time
        self._sent: dict[str, tuple[Reading, float]] = {}  # the last sent, its time

    @property
    def tracked(self) -> int:
        """Endpoints whose last scrape is remembered (those scraped in the last `FORGET_S`,
        once a reading has gone out since)."""
        return len(self._latest)

    def scraped(
        self, endpoint: str, reading: Reading, refresh_s: float
    ) -> list[tuple[str, Reading, float]]:
        """A new reading of `endpoint`; returns the readings to send now (maybe none)."""
        now = self._wall()
        self._latest[endpoint] = (reading, now)
        sent = self._sent.get(endpoint)
        if sent is not None and sent[0] == reading and now - sent[1] < refresh_s:
            return []
        out = [(endpoint, reading, now)]
        for other, (latest, at) in list(self._latest.items()):
            if now - at > FORGET_S:  # gone from the pools: kept, it would be kept forever
                del self._latest[other]
                self._sent.pop(other, None)
                continue
            last = self._sent.get(other)
            if other == endpoint or now - at > refresh_s or last is None:
                continue  # not scraped lately (no longer led), or never sent: on its own
            if now - last[1] >= refresh_s / 2:
                out.append((other, latest, at))
        for name, content, at in out:
            self._sent[name] = (content, at)
        return out

    def forget(self) -> None:
        """Send every endpoint's next reading (leadership changed hands)."""
        self._latest.clear()
        self._sent.clear()
