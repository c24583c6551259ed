"""Provider health: cool-downs learned from callers' Aborts and upstream status codes.

The picker cannot see a provider's credentials or reachability; the caller can, and reports
it (Abort with BACKEND_UNRESOLVED / BACKEND_UNAUTHORIZED, or the upstream status in
ReportFirstToken). A cooled provider is skipped until its deadline; a repeat extends the
deadline, never shortens it. Server errors cool a provider only past a threshold in a window.

In a cluster, `kinference.cluster.blacklist` shares cool-downs through Redis: `listener`
hears every report, `adopt` takes a cool-down another replica published, `clear_published`
forgets one whose key an operator deleted. This module stays free of Redis.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from kinference.config.routing import Cooldowns, ProviderHealthSettings

UNRESOLVED = "backend_unresolved"
UNAUTHORIZED = "backend_unauthorized"
NOT_FOUND = "not_found"
RATE_LIMITED = "rate_limited"
SERVER_ERROR = "server_error"
REASONS = (UNRESOLVED, UNAUTHORIZED, NOT_FOUND, RATE_LIMITED, SERVER_ERROR)


def _default_seconds() -> dict[str, float]:
    return {reason: float(seconds) for reason, seconds in Cooldowns().model_dump().items()}


_DEFAULTS = ProviderHealthSettings()  # the defaults' one home is the policy's model


@dataclass(frozen=True, slots=True)
class CooldownPolicy:
    """Seconds of cool-down per reason, and the server-error threshold (defaults: those of
    the policy file's `provider_health:` section)."""

    seconds: dict[str, float] = field(default_factory=_default_seconds)
    server_error_threshold: int = _DEFAULTS.server_error_threshold
    server_error_window_s: float = _DEFAULTS.server_error_window_s
    max_cooldown_s: float = _DEFAULTS.max_cooldown_s


@dataclass(slots=True)
class Cooldown:
    """One provider's cool-down, readable by operators."""

    reason: str
    detail: str
    count: int
    first_seen: float  # wall-clock seconds
    last_seen: float  # wall-clock seconds
    until: float  # monotonic seconds
    # True once Redis holds this cool-down as it stands: only then may a missing key clear it.
    published: bool = False

    def remaining(self, now: float) -> float:
        return max(self.until - now, 0.0)


def reason_for_status(status: int) -> str | None:
    """The cool-down reason an upstream HTTP status stands for, if any."""
    if status in (401, 403):
        return UNAUTHORIZED
    if status == 404:
        return NOT_FOUND
    if status == 429:
        return RATE_LIMITED
    if 500 <= status <= 599:
        return SERVER_ERROR
    return None


Listener = Callable[[str, Cooldown], None]  # (provider, its cool-down)


class ProviderHealth:
    """Cool-downs per provider (`namespace/name`).

    `listener`, when set, is called after every `report` with the provider and its (new or
    extended) cool-down; it runs on the Pick path, so it must be cheap and never block.
    """

    def __init__(
        self,
        policy: CooldownPolicy,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        listener: Listener | None = None,
    ) -> None:
        self.policy = policy
        self.listener = listener
        self._clock = clock
        self._wall = wall
        self._cooled: dict[str, Cooldown] = {}
        self._server_errors: dict[str, deque[float]] = {}

    def now(self) -> float:
        """The monotonic clock cool-down deadlines are kept in."""
        return self._clock()

    def wall(self) -> float:
        """The wall clock (epoch seconds) `first_seen` and `last_seen` are kept in."""
        return self._wall()

    def cooled(self, provider: str) -> Cooldown | None:
        """The provider's active cool-down, or None when it may be used."""
        cooldown = self._cooled.get(provider)
        if cooldown is None:
            return None
        if cooldown.until <= self._clock():
            del self._cooled[provider]
            return None
        return cooldown

    def active(self) -> dict[str, Cooldown]:
        now = self._clock()
        return {ref: c for ref, c in self._cooled.items() if c.until > now}

    def report(self, provider: str, reason: str, detail: str = "") -> Cooldown:
        """Cool the provider down for `reason`; a repeat extends (never shortens) it."""
        now, wall = self._clock(), self._wall()
        seconds = self.policy.seconds.get(reason, 60.0)
        current = self.cooled(provider)
        if current is None:
            current = Cooldown(reason, detail, 0, wall, wall, now)
            self._cooled[provider] = current
        current.count += 1
        current.last_seen = wall
        # Capped when it is set, never cut afterwards (a reload may lower the cap).
        until = now + min(seconds, self.policy.max_cooldown_s)
        if until >= current.until:  # the reason shown is the one that lasts longest
            current.until, current.reason, current.detail = until, reason, detail[:200]
        current.published = False  # Redis does not hold this report yet
        if self.listener is not None:
            self.listener(provider, current)
        return current

    def upstream_status(self, provider: str, status: int) -> Cooldown | None:
        """Learn from a first-token report's upstream status; returns a new cool-down."""
        reason = reason_for_status(status)
        if reason is None:
            return None
        if reason == SERVER_ERROR and not self._server_error_threshold_reached(provider):
            return None
        return self.report(provider, reason, f"upstream status {status}")

    def _server_error_threshold_reached(self, provider: str) -> bool:
        now = self._clock()
        recent = self._server_errors.setdefault(provider, deque())
        recent.append(now)
        while recent and recent[0] <= now - self.policy.server_error_window_s:
            recent.popleft()
        return len(recent) >= self.policy.server_error_threshold

    def clear(self, provider: str) -> bool:
        self._server_errors.pop(provider, None)
        return self._cooled.pop(provider, None) is not None

    def adopt(
        self,
        provider: str,
        reason: str,
        detail: str,
        *,
        count: int,
        first_seen: float,
        last_seen: float,
        remaining_s: float,
    ) -> Cooldown:
        """Take a cool-down read from Redis (another replica's, or an operator's).

        It extends a local cool-down, never shortens it; the count is the larger of the two
        (Redis sums every replica's reports). The listener is not called: Redis has it already.
        """
        until = self._clock() + remaining_s
        current = self.cooled(provider)
        if current is None:
            current = Cooldown(reason, detail[:200], count, first_seen, last_seen, until, True)
            self._cooled[provider] = current
            return current
        current.count = max(current.count, count)
        current.first_seen = min(current.first_seen, first_seen)
        current.last_seen = max(current.last_seen, last_seen)
        if until > current.until:
            current.until, current.reason, current.detail = until, reason, detail[:200]
        return current

    def clear_published(self, provider: str) -> bool:
        """Its key is gone from Redis (deleted by an operator): forget a published cool-down.

        One Redis does not hold yet (Redis down, or the write still queued) is kept: the key
        is missing because it was never written, not because someone cleared it.
        """
        current = self._cooled.get(provider)
        if current is None or not current.published:
            return False
        return self.clear(provider)

    def mark_published(self, provider: str, cooldown: Cooldown) -> None:
        """Redis now holds `cooldown`; ignored when the provider's cool-down was replaced."""
        if self._cooled.get(provider) is cooldown:
            cooldown.published = True

    def unpublish_all(self) -> list[str]:
        """Redis may have lost its keys (it failed): every active cool-down must be written
        again before a missing key may clear it. Returns their providers."""
        active = self.active()
        for cooldown in active.values():
            cooldown.published = False
        return list(active)
