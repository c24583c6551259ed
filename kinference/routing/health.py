"""Provider health: cool-downs learned from callers' Aborts and upstream status codes.

The picker cannot see a provider's credentials or reachability; the caller can, and reports
it (Abort with BACKEND_UNRESOLVED / BACKEND_UNAUTHORIZED, or the upstream status in
ReportFirstToken). A cooled provider is skipped until its deadline; a repeat extends the
deadline, never shortens it. Server errors cool a provider only past a threshold in a window.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

UNRESOLVED = "backend_unresolved"
UNAUTHORIZED = "backend_unauthorized"
NOT_FOUND = "not_found"
RATE_LIMITED = "rate_limited"
SERVER_ERROR = "server_error"
REASONS = (UNRESOLVED, UNAUTHORIZED, NOT_FOUND, RATE_LIMITED, SERVER_ERROR)


@dataclass(frozen=True, slots=True)
class CooldownPolicy:
    """Seconds of cool-down per reason, and the server-error threshold."""

    seconds: dict[str, float] = field(
        default_factory=lambda: {
            UNRESOLVED: 60.0,
            UNAUTHORIZED: 300.0,
            NOT_FOUND: 60.0,
            RATE_LIMITED: 10.0,
            SERVER_ERROR: 30.0,
        }
    )
    server_error_threshold: int = 3
    server_error_window_s: float = 30.0
    max_cooldown_s: float = 3600.0


@dataclass(slots=True)
class Cooldown:
    """One provider's cool-down, readable by operators."""

    reason: str
    detail: str
    count: int
    first_seen: float  # wall-clock seconds
    last_seen: float  # wall-clock seconds
    until: float  # monotonic seconds

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


class ProviderHealth:
    """Cool-downs per provider (`namespace/name`)."""

    def __init__(
        self,
        policy: CooldownPolicy,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.policy = policy
        self._clock = clock
        self._wall = wall
        self._cooled: dict[str, Cooldown] = {}
        self._server_errors: dict[str, deque[float]] = {}

    def now(self) -> float:
        """The monotonic clock cool-down deadlines are kept in."""
        return self._clock()

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
