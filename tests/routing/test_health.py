"""Provider cool-downs: per reason, extended never shortened, capped, 5xx thresholds."""

from __future__ import annotations

import pytest

from kinference.config import parse_policy
from kinference.routing import CooldownPolicy, ProviderHealth, compile_policy
from kinference.routing.health import (
    NOT_FOUND,
    RATE_LIMITED,
    REASONS,
    SERVER_ERROR,
    UNAUTHORIZED,
    UNRESOLVED,
    Cooldown,
    reason_for_status,
)
from kinference.routing.table import WorkerTable
from tests.clock import FakeClock

P = "ai/openai"
Q = "ai/azure"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(500.0)


@pytest.fixture
def wall() -> FakeClock:
    return FakeClock(1_700_000_000.0)


@pytest.fixture
def health(clock: FakeClock, wall: FakeClock) -> ProviderHealth:
    return ProviderHealth(CooldownPolicy(), clock=clock, wall=wall)


def test_default_seconds_per_reason() -> None:
    assert CooldownPolicy().seconds == {
        UNRESOLVED: 60.0,
        UNAUTHORIZED: 300.0,
        NOT_FOUND: 60.0,
        RATE_LIMITED: 10.0,
        SERVER_ERROR: 30.0,
    }
    assert set(REASONS) == set(CooldownPolicy().seconds)


def test_compiled_from_the_policy_file() -> None:
    policy = parse_policy(
        """
provider_health:
  cooldown_s: {backend_unauthorized: 120, rate_limited: 2}
  server_error_threshold: 5
  server_error_window_s: 9
  max_cooldown_s: 600
"""
    )
    cooldowns = compile_policy(policy, WorkerTable()).cooldowns
    assert cooldowns.seconds[UNAUTHORIZED] == 120
    assert cooldowns.seconds[RATE_LIMITED] == 2
    assert cooldowns.seconds[UNRESOLVED] == 60
    assert set(cooldowns.seconds) == set(REASONS)
    assert (cooldowns.server_error_threshold, cooldowns.server_error_window_s) == (5, 9)
    assert cooldowns.max_cooldown_s == 600


@pytest.mark.parametrize(
    ("reason", "seconds"),
    [
        (UNRESOLVED, 60),
        (UNAUTHORIZED, 300),
        (NOT_FOUND, 60),
        (RATE_LIMITED, 10),
        (SERVER_ERROR, 30),
    ],
)
def test_cooldown_per_reason(
    health: ProviderHealth, clock: FakeClock, reason: str, seconds: float
) -> None:
    assert health.cooled(P) is None
    cooldown = health.report(P, reason, "why")
    assert cooldown.until == clock.now + seconds
    assert cooldown.remaining(clock.now) == seconds
    assert (cooldown.reason, cooldown.detail, cooldown.count) == (reason, "why", 1)
    clock.now += seconds - 0.001
    assert health.cooled(P) is cooldown
    assert health.cooled(Q) is None
    clock.now += 0.001
    assert health.cooled(P) is None  # expired
    assert health.active() == {}


def test_unknown_reason_gets_a_minute(health: ProviderHealth, clock: FakeClock) -> None:
    assert health.report(P, "something_else").until == clock.now + 60


def test_repeat_extends(health: ProviderHealth, clock: FakeClock, wall: FakeClock) -> None:
    first = health.report(P, UNRESOLVED, "dns")
    clock.now += 50
    wall.now += 50
    again = health.report(P, UNRESOLVED, "dns again")
    assert again is first
    assert again.until == clock.now + 60  # 60 s from the repeat
    assert again.count == 2
    assert (again.first_seen, again.last_seen) == (wall.now - 50, wall.now)
    assert again.detail == "dns again"


def test_repeat_never_shortens(health: ProviderHealth, clock: FakeClock, wall: FakeClock) -> None:
    health.report(P, UNAUTHORIZED, "401 from upstream")
    until = clock.now + 300
    clock.now += 1
    wall.now += 1
    cooldown = health.report(P, RATE_LIMITED, "429")  # 10 s would end sooner: kept at 300
    assert cooldown.until == until
    assert cooldown.count == 2
    assert cooldown.remaining(clock.now) == 299
    # The reason shown is the one that lasts: the shorter report changes neither it nor
    # the detail, though it counts and is seen.
    assert (cooldown.reason, cooldown.detail) == (UNAUTHORIZED, "401 from upstream")
    assert cooldown.last_seen == wall.now
    assert health.cooled(P) is cooldown


def test_a_longer_repeat_takes_over_the_reason(health: ProviderHealth, clock: FakeClock) -> None:
    health.report(P, RATE_LIMITED, "429")
    clock.now += 1
    cooldown = health.report(P, UNAUTHORIZED, "401")
    assert cooldown.until == clock.now + 300
    assert (cooldown.reason, cooldown.detail, cooldown.count) == (UNAUTHORIZED, "401", 2)
    clock.now += 20  # long past the rate limit's own end
    assert health.cooled(P) is cooldown


def test_a_repeat_ending_at_the_same_time_takes_over_the_reason(
    health: ProviderHealth, clock: FakeClock
) -> None:
    health.report(P, UNRESOLVED, "dns")  # 60 s
    cooldown = health.report(P, NOT_FOUND, "404")  # 60 s, at the same instant
    assert cooldown.until == clock.now + 60
    assert (cooldown.reason, cooldown.detail, cooldown.count) == (NOT_FOUND, "404", 2)


def test_capped_at_max(clock: FakeClock) -> None:
    policy = CooldownPolicy(seconds={UNAUTHORIZED: 5000.0}, max_cooldown_s=100.0)
    health = ProviderHealth(policy, clock=clock)
    assert health.report(P, UNAUTHORIZED).until == clock.now + 100


def test_lowering_the_cap_never_shortens_a_running_cooldown(clock: FakeClock) -> None:
    health = ProviderHealth(CooldownPolicy(), clock=clock)
    until = health.report(P, UNAUTHORIZED, "401").until  # 300 s
    # A reload: App.apply_policy replaces the policy in place.
    health.policy = CooldownPolicy(
        seconds={**CooldownPolicy().seconds, UNAUTHORIZED: 100.0}, max_cooldown_s=100.0
    )
    clock.now += 1
    cooldown = health.report(P, RATE_LIMITED, "429")
    assert cooldown.until == until
    assert (cooldown.reason, cooldown.detail) == (UNAUTHORIZED, "401")
    cooldown = health.report(P, UNAUTHORIZED, "401 again")  # now capped at 100 s: shorter
    assert cooldown.until == until
    assert cooldown.detail == "401"
    # A new cool-down after it ends is capped by the new policy.
    clock.now = until
    assert health.cooled(P) is None
    assert health.report(P, UNAUTHORIZED).until == clock.now + 100


def test_detail_is_bounded(health: ProviderHealth) -> None:
    assert len(health.report(P, UNAUTHORIZED, "x" * 10_000).detail) == 200


def test_an_expired_cooldown_starts_afresh(health: ProviderHealth, clock: FakeClock) -> None:
    health.report(P, RATE_LIMITED)
    clock.now += 11
    fresh = health.report(P, RATE_LIMITED)
    assert fresh.count == 1
    assert fresh.until == clock.now + 10


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        (200, None),
        (0, None),
        (302, None),
        (400, None),
        (401, UNAUTHORIZED),
        (403, UNAUTHORIZED),
        (404, NOT_FOUND),
        (408, None),
        (429, RATE_LIMITED),
        (499, None),
        (500, SERVER_ERROR),
        (503, SERVER_ERROR),
        (599, SERVER_ERROR),
        (600, None),
    ],
)
def test_status_to_reason(status: int, reason: str | None) -> None:
    assert reason_for_status(status) == reason


@pytest.mark.parametrize(
    ("status", "reason", "seconds"),
    [
        (401, UNAUTHORIZED, 300),
        (403, UNAUTHORIZED, 300),
        (404, NOT_FOUND, 60),
        (429, RATE_LIMITED, 10),
    ],
)
def test_client_errors_cool_at_once(
    health: ProviderHealth, clock: FakeClock, status: int, reason: str, seconds: float
) -> None:
    cooldown = health.upstream_status(P, status)
    assert cooldown is not None
    assert (cooldown.reason, cooldown.detail) == (reason, f"upstream status {status}")
    assert cooldown.until == clock.now + seconds
    assert health.cooled(P) is cooldown


@pytest.mark.parametrize("status", [200, 201, 400, 422])
def test_other_statuses_are_ignored(health: ProviderHealth, status: int) -> None:
    assert health.upstream_status(P, status) is None
    assert health.cooled(P) is None


def test_server_errors_cool_past_the_threshold(health: ProviderHealth, clock: FakeClock) -> None:
    assert health.upstream_status(P, 500) is None
    clock.now += 10
    assert health.upstream_status(P, 502) is None
    assert health.cooled(P) is None
    assert health.upstream_status(Q, 500) is None  # another provider's count is its own
    clock.now += 10
    cooldown = health.upstream_status(P, 503)  # the third within 30 s
    assert cooldown is not None
    assert cooldown.reason == SERVER_ERROR
    assert cooldown.until == clock.now + 30
    assert health.cooled(Q) is None


def test_server_errors_outside_the_window_do_not_count(
    health: ProviderHealth, clock: FakeClock
) -> None:
    for _ in range(2):
        assert health.upstream_status(P, 500) is None
    clock.now += 30  # the first two leave the window
    assert health.upstream_status(P, 500) is None
    clock.now += 29
    assert health.upstream_status(P, 500) is None
    assert health.upstream_status(P, 500) is not None  # three within 30 s


def test_server_error_threshold_of_one(clock: FakeClock) -> None:
    health = ProviderHealth(CooldownPolicy(server_error_threshold=1), clock=clock)
    assert health.upstream_status(P, 500) is not None


def test_clear(health: ProviderHealth, clock: FakeClock) -> None:
    health.report(P, UNAUTHORIZED)
    health.report(Q, RATE_LIMITED)
    assert set(health.active()) == {P, Q}
    assert health.clear(P)
    assert not health.clear(P)
    assert health.cooled(P) is None
    assert set(health.active()) == {Q}
    # Clearing forgets recent server errors too.
    health.upstream_status(Q, 500)
    health.upstream_status(Q, 500)
    health.clear(Q)
    assert health.upstream_status(Q, 500) is None


def test_active_lists_only_running_cooldowns(health: ProviderHealth, clock: FakeClock) -> None:
    health.report(P, RATE_LIMITED)
    health.report(Q, UNAUTHORIZED)
    clock.now += 10
    assert set(health.active()) == {Q}
    assert health.now() == clock.now


# --- The hooks the cluster layer (kinference.cluster.blacklist) shares cool-downs through.


def test_listener_hears_every_report(health: ProviderHealth, clock: FakeClock) -> None:
    heard: list[tuple[str, int, bool]] = []
    health.listener = lambda provider, c: heard.append((provider, c.count, c.published))
    first = health.report(P, UNAUTHORIZED, "401")
    first.published = True  # as if written
    clock.now += 1
    health.report(P, RATE_LIMITED, "429")  # shorter: still heard, it counts
    health.upstream_status(Q, 404)
    health.upstream_status(Q, 500)  # below the threshold: no report
    assert heard == [(P, 1, False), (P, 2, False), (Q, 1, False)]
    assert not first.published  # Redis does not hold the repeat yet


def test_no_listener_by_default(clock: FakeClock) -> None:
    health = ProviderHealth(CooldownPolicy(), clock=clock)
    assert health.listener is None
    health.report(P, UNAUTHORIZED)  # nothing to call


def adopt(
    health: ProviderHealth, wall: FakeClock, remaining_s: float, **fields: object
) -> Cooldown:
    values: dict[str, object] = {
        "reason": UNAUTHORIZED,
        "detail": "401 elsewhere",
        "count": 3,
        "first_seen": wall.now - 10,
        "last_seen": wall.now - 1,
    } | fields
    return health.adopt(
        P,
        str(values["reason"]),
        str(values["detail"]),
        count=int(str(values["count"])),
        first_seen=float(str(values["first_seen"])),
        last_seen=float(str(values["last_seen"])),
        remaining_s=remaining_s,
    )


def test_adopt_a_new_cooldown(health: ProviderHealth, clock: FakeClock, wall: FakeClock) -> None:
    heard: list[str] = []
    health.listener = lambda provider, _c: heard.append(provider)
    cooldown = adopt(health, wall, 120.0)
    assert health.cooled(P) is cooldown
    assert cooldown.until == clock.now + 120
    assert (cooldown.reason, cooldown.detail, cooldown.count) == (UNAUTHORIZED, "401 elsewhere", 3)
    assert (cooldown.first_seen, cooldown.last_seen) == (wall.now - 10, wall.now - 1)
    assert cooldown.published  # read from Redis: its key exists
    assert heard == []  # not written back


def test_adopt_extends_never_shortens(
    health: ProviderHealth, clock: FakeClock, wall: FakeClock
) -> None:
    local = health.report(P, RATE_LIMITED, "429")  # 10 s, count 1, unpublished
    cooldown = adopt(health, wall, 5.0, count=1, first_seen=wall.now + 1, last_seen=wall.now)
    assert cooldown is local
    assert cooldown.until == clock.now + 10  # kept: the shorter one does not cut it
    assert (cooldown.reason, cooldown.detail) == (RATE_LIMITED, "429")
    assert cooldown.first_seen == wall.now  # the earlier of the two
    assert not cooldown.published  # its own write is still to come
    cooldown = adopt(health, wall, 120.0, count=5, last_seen=wall.now + 2)
    assert cooldown.until == clock.now + 120  # the longer one extends it, and names it
    assert (cooldown.reason, cooldown.detail, cooldown.count) == (UNAUTHORIZED, "401 elsewhere", 5)
    assert (cooldown.first_seen, cooldown.last_seen) == (wall.now - 10, wall.now + 2)
    adopt(health, wall, 60.0, count=2)
    assert cooldown.count == 5  # Redis' sum is never below our own count
    assert len(adopt(health, wall, 500.0, detail="x" * 1000).detail) == 200


def test_clear_published_keeps_unpublished(health: ProviderHealth, wall: FakeClock) -> None:
    cooldown = health.report(P, UNAUTHORIZED)
    assert not health.clear_published(P)  # never written: a missing key says nothing
    assert health.cooled(P) is cooldown
    health.mark_published(P, cooldown)
    assert cooldown.published
    assert health.clear_published(P)  # its key was deleted
    assert health.cooled(P) is None
    assert not health.clear_published(Q)
    adopt(health, wall, 30.0)
    assert health.clear_published(P)  # adopted from a key that is gone now


def test_mark_published_ignores_a_replaced_cooldown(
    health: ProviderHealth, clock: FakeClock
) -> None:
    old = health.report(P, RATE_LIMITED)
    clock.now += 11  # expired
    new = health.report(P, RATE_LIMITED)
    health.mark_published(P, old)
    assert not new.published
    health.mark_published(Q, new)
    assert not new.published


def test_unpublish_all(health: ProviderHealth, clock: FakeClock, wall: FakeClock) -> None:
    adopt(health, wall, 30.0)
    health.report(Q, RATE_LIMITED)
    assert sorted(health.unpublish_all()) == sorted([P, Q])
    assert not any(c.published for c in health.active().values())
    assert not health.clear_published(P)
    assert health.wall() == wall.now
