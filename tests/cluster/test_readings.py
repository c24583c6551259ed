"""The scrape leader sends an engine reading when it changed, or when the last one sent is
`refresh_s` old: an idle pool no longer costs a flush per scrape (kinference.cluster.readings)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any, cast

from kinference.cluster.keys import Keys
from kinference.cluster.node import ClusterNode
from kinference.cluster.outbox import Outbox
from kinference.cluster.readings import FORGET_S, ReadingThrottle, refresh_after
from kinference.cluster.replication import read_block_ms
from kinference.cluster.setup import EngineSharing
from kinference.config.routing import EngineMetricsSettings
from kinference.workers import EngineSnapshot

IDLE = {"ready": True, "read": True, "waiting": 0}
BUSY = {"ready": True, "read": True, "waiting": 3}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_refresh_keeps_a_copy_fresh_within_stale_after() -> None:
    settings = EngineMetricsSettings()  # interval 0.2 s, timeout 0.5 s, stale after 1 s
    refresh = refresh_after(settings.stale_after_s, settings.interval_s, settings.timeout_s)
    assert round(refresh, 6) == 0.23  # 1 - 0.22 - 0.5 - 0.05
    assert refresh_after(1.0, 0.2, 0.1) == 0.4  # a short timeout: half of what stale leaves
    assert refresh_after(0.2, 0.2, 0.1) == 0.0  # stale after one interval: every reading goes


def test_an_unchanged_reading_waits_for_the_refresh_a_changed_one_does_not() -> None:
    clock = Clock()
    throttle = ReadingThrottle(clock)
    assert throttle.scraped("a", IDLE, 0.5) == [("a", IDLE, 1000.0)]  # first: sent
    sent = []
    for _ in range(10):  # 2.5 s of idle scrapes every 0.25 s
        clock.now += 0.25
        sent += throttle.scraped("a", IDLE, 0.5)
    assert [at - 1000.0 for _, _, at in sent] == [0.5, 1.0, 1.5, 2.0, 2.5]
    clock.now += 0.25
    assert throttle.scraped("a", BUSY, 0.5) == [("a", BUSY, clock.now)]  # changed: at once
    clock.now += 0.25
    assert throttle.scraped("a", IDLE, 0.5) == [("a", IDLE, clock.now)]


def test_no_refresh_sends_every_reading() -> None:
    clock = Clock()
    throttle = ReadingThrottle(clock)
    for _ in range(5):
        clock.now += 0.25
        assert throttle.scraped("a", IDLE, 0.0) == [("a", IDLE, clock.now)]


def test_readings_due_soon_travel_together_with_their_own_scrape_time() -> None:
    clock = Clock()
    throttle = ReadingThrottle(clock)
    throttle.scraped("a", IDLE, 0.5)
    clock.now += 0.125
    throttle.scraped("b", IDLE, 0.5)  # sent at 1000.125
    clock.now += 0.25
    assert throttle.scraped("b", IDLE, 0.5) == []  # 1000.375: unchanged, sent 0.25 s ago
    clock.now += 0.125
    # 1000.5: a is due; b (sent 0.375 s ago, over half a refresh) goes with it, stamped
    # with its own scrape (1000.375).
    sent = throttle.scraped("a", IDLE, 0.5)
    assert [(name, at) for name, _, at in sent] == [("a", 1000.5), ("b", 1000.375)]
    clock.now += 0.125
    assert throttle.scraped("b", IDLE, 0.5) == []  # 1000.625: b was just refreshed


def test_an_endpoint_no_longer_scraped_is_not_sent_along() -> None:
    clock = Clock()
    throttle = ReadingThrottle(clock)
    throttle.scraped("gone", IDLE, 0.5)
    along = []
    for _ in range(8):
        clock.now += 0.25
        along += [
            (clock.now, at) for name, _, at in throttle.scraped("a", IDLE, 0.5) if name != "a"
        ]
    # Its last scrape went along while recent (stamped with its time), then no more.
    assert along == [(1000.25, 1000.0)]


def sharing(outbox: Outbox, clock: Clock, metrics: EngineMetricsSettings | None) -> EngineSharing:
    redis = SimpleNamespace(register_script=lambda script: None)
    node = SimpleNamespace(redis=redis, keys=Keys("k"), instance="me", outbox=outbox)
    return EngineSharing(cast(ClusterNode, node), lambda: None, lambda: metrics, clock)


def idle_snapshot() -> EngineSnapshot:
    return EngineSnapshot(waiting=0, running=0, kv_usage=0.0, lora_adapters=None, scraped_at=0)


def test_an_idle_leader_sends_a_reading_per_refresh_not_per_scrape() -> None:
    clock, outbox = Clock(), Outbox()
    shared = sharing(outbox, clock, EngineMetricsSettings(interval_s=0.25, stale_after_s=1.25))
    for _ in range(10):  # 2.5 s of scrapes every 0.25 s, nothing changes
        shared.publish("10.0.0.1:8000", idle_snapshot(), ready=True)
        clock.now += 0.25
    events: list[list[Any]] = outbox.take()[0]
    assert len(events) == 5  # at 0, 0.5, 1, 1.5 and 2 s (was 10: every scrape)
    reading = events[-1][2]
    assert reading["at"] == 1002.0 and reading["by"] == "me" and reading["waiting"] == 0
    shared.publish("10.0.0.1:8000", None, ready=False)  # a failed scrape goes at once
    assert outbox.take()[0][0][2]["read"] is False


def test_without_engine_metrics_settings_every_reading_goes() -> None:
    clock, outbox = Clock(), Outbox()
    shared = sharing(outbox, clock, None)
    for _ in range(5):
        shared.publish("10.0.0.1:8000", idle_snapshot(), ready=True)
        clock.now += 0.25
    assert len(outbox.take()[0]) == 5


def test_an_idle_read_waits_half_a_second_or_a_quarter_of_the_stale_threshold() -> None:
    """An idle replica's XREAD BLOCK returns twice a second (was ten times), and never so
    late that `gap()` (stale after KINFERENCE_REDIS_STALE_AFTER_S, 2 s) could fire."""
    assert read_block_ms(2.0) == 500  # the default threshold
    assert read_block_ms(0.4) == 100
    assert read_block_ms(0.001) == 1


def test_an_endpoint_gone_from_the_pools_is_forgotten() -> None:
    """Pods come and go with new addresses: the leader does not keep every one it scraped."""
    clock = Clock()
    throttle = ReadingThrottle(clock)
    for pod in range(50):
        throttle.scraped(f"10.0.0.{pod}:8000", IDLE, 0.4)
    clock.now += FORGET_S + 1
    assert throttle.scraped("10.0.1.1:8000", BUSY, 0.4) == [("10.0.1.1:8000", BUSY, clock.now)]
    assert throttle.tracked == 1
    clock.now += 0.1  # the one still scraped is remembered: unchanged and recent, not sent
    assert throttle.scraped("10.0.1.1:8000", BUSY, 0.4) == []


def test_a_copy_is_replaced_before_it_goes_stale_when_a_scrape_answers_late() -> None:
    """After a reading withheld, the next may come an interval (+10 % jitter) plus a whole
    scrape timeout later: the next scrape starts an interval after this one began and may
    answer just inside its timeout. At the defaults (interval 0.2 s, timeout 0.5 s, stale
    after 1 s) a copy sent, fast scrapes withheld, then a slow one reached 1.03 s at the
    other replicas with a refresh of 0.4 s: metrics unknown there for a moment."""
    settings = EngineMetricsSettings()
    for fast in range(6):  # fast scrapes between slow ones
        for spacing in (0.18, 0.22):  # the jitter's shortest and longest intervals
            clock, outbox = Clock(), Outbox()
            shared = sharing(outbox, clock, settings)
            begun = clock.now
            for turn in range(20):
                slow = turn % (fast + 1) == fast
                clock.now = begun + (0.49 if slow else 0.0)  # answered
                shared.publish("10.0.0.1:8000", idle_snapshot(), ready=True)
                begun += max(0.22 if slow else spacing, clock.now - begun)  # the next begins
            stamps = [event[2]["at"] for event in outbox.take()[0]]
            gaps = [later - earlier for earlier, later in itertools.pairwise(stamps)]
            # Plus the flush's batch window (15 ms) and the stream: inside stale_after_s.
            assert max(gaps) + 0.05 <= settings.stale_after_s, (fast, spacing, max(gaps))
