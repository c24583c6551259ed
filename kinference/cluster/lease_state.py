"""What one replica keeps locally for the leased tenant budgets (`cluster/leases.py`): each
tenant's leases (`LeaseBook`, `TenantLeases`), and the tokens it has not yet written to
Redis (`Unsent`).

Both are plain state with no I/O: `LeasedBudget` decides, its lease rounds send.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from kinference.routing.budget import WINDOW_S, TokenWindow

LEASE_LIFE_S = 10  # seconds a leased slice may be spent (must stay under LEASES_TTL_S - 60)
IDLE_S = 10.0  # seconds: a tenant unseen this long is not leased for any more
FORGET_S = 120.0  # seconds: an idle tenant's state (with no lease left) is dropped
BUFFER_LIMIT = 10_000  # (tenant, second) entries of unpublished tokens kept while disconnected

Entry = tuple[str, int]  # (tenant, epoch second or minute)
Owed = dict[str, list[tuple[int, int]]]  # tenant -> [(charge second, tokens)]


@dataclass(frozen=True, slots=True)
class LeaseCall:
    """One lease call of one tenant: its id, the (second, tokens) pairs it sends (re-seeded
    charges first) and those of them that are this round's new charges."""

    id: str
    sent: list[tuple[int, int]]
    pairs: list[tuple[int, int]]


@dataclass
class TenantLeases:
    """What one replica knows of one tenant's budget."""

    limit: int
    seen: float  # wall time of the last check or record
    pieces: deque[list[int]] = field(default_factory=deque)  # [charge second, tokens left]
    credit: bool = True  # one request may be admitted without a lease
    overshot: bool = False  # tokens spent beyond the leases since the last lease round
    window: TokenWindow = field(default_factory=TokenWindow)  # all tokens this replica recorded
    leased: int = 0  # the cluster's leased total at the last lease round
    # (charge second, tokens) this replica added to the leases hash, kept for a re-seed.
    charged: deque[tuple[int, int]] = field(default_factory=deque)
    reseed: list[tuple[int, int]] = field(default_factory=list)  # to send again (hash lost)
    asked: int = 0  # the lease round that answers this tenant's spent credit (0: none asked)
    doubt: LeaseCall | None = None  # a lease call that failed, to send again unchanged first

    def charges_in_window(self, now: float) -> bool:
        while self.charged and self.charged[0][0] <= now - WINDOW_S:
            self.charged.popleft()
        return bool(self.charged)

    def charges_leave_in(self, now: float, limit: int) -> float | None:
        """Seconds until this replica's own charges leave the leases window far enough for a
        grant (None: they never will alone)."""
        excess = self.leased - limit + 1  # a grant needs the window's sum under the limit
        for second, tokens in sorted(self.charged):
            excess -= tokens
            if excess <= 0:  # the script drops a second once it is 60 s old
                return max(second + WINDOW_S - now, 0.0)
        return None

    def refund(self, tokens: int) -> int:
        """Put unspent tokens back into the newest live piece; returns what did not fit."""
        if self.pieces and tokens > 0:
            self.pieces[-1][1] += tokens
            return 0
        return tokens

    def expire(self, now: float) -> list[tuple[int, int]]:
        """Drop pieces past their life; returns (charge second, tokens left) to hand back."""
        gone = []
        while self.pieces and now >= self.pieces[0][0]:
            second, left = self.pieces.popleft()
            if left > 0:
                gone.append((second, left))
        return gone

    def balance(self) -> int:  # tokens left in unexpired pieces (expire first)
        return sum(left for _, left in self.pieces)

    def want(self, now: float, replicas: int) -> int:
        """Tokens to lease for a tenant in use whose balance is under half a slice."""
        if now - self.seen > IDLE_S:
            return 0
        if self.reseed:  # the first call after a lost hash only sends the charges again
            return 0
        size = max(self.limit // (4 * max(replicas, 1)), 1)
        return size if 2 * self.balance() < size else 0

    def settle(
        self, sent: list[tuple[int, int]], answer: tuple[int, int, bool], now: float
    ) -> bool:
        """Record a lease round's answer to the charges `sent`: (granted, leased in the
        window, whether the hash was lost). Returns whether the charges must be sent again."""
        granted, leased, lost = answer
        resent, self.reseed = self.reseed, []
        # The hash was gone: send this replica's charges in the window again, but not those
        # this call carried (it applied them: they were charged twice, 700 for 400 spent),
        # nor any when it carried them all (a re-seed).
        if lost and not resent:
            self.reseed = [(sec, tokens) for sec, tokens in self.charged if sec > now - WINDOW_S]
        self.charged.extend(sent)
        if granted > 0:
            self.charged.append((int(now) + LEASE_LIFE_S, granted))
            self.pieces.append([int(now) + LEASE_LIFE_S, granted])
            self.credit = self.credit or not self.overshot
        self.leased = leased
        return lost

    def spend(self, tokens: int) -> int:
        """Take `tokens` from the oldest pieces first; returns what they could not cover."""
        for piece in self.pieces:
            taken = min(piece[1], tokens)
            piece[1] -= taken
            tokens -= taken
        return tokens


class LeaseBook:
    """Every tenant this replica leases for, and the tokens it has not yet sent to Redis."""

    def __init__(
        self, wall: Callable[[], float], on_new: Callable[[], None] = lambda: None
    ) -> None:
        """`on_new` is called when a tenant is first seen (it wakes an idle lease loop)."""
        self._tenants: dict[str, TenantLeases] = {}
        self.unsent = Unsent()
        self._wall = wall
        self._on_new = on_new

    def __iter__(self) -> Iterator[tuple[str, TenantLeases]]:
        return iter(list(self._tenants.items()))

    @property
    def empty(self) -> bool:
        return not self._tenants

    def get(self, tenant: str) -> TenantLeases | None:
        return self._tenants.get(tenant)

    def touch(self, tenant: str, limit: int) -> TenantLeases:
        """The tenant's state, created at first sight; marks it seen now."""
        state = self._tenants.get(tenant)
        if state is None:
            state = self._tenants[tenant] = TenantLeases(limit, self._wall())
            self._on_new()
        state.limit, state.seen = limit, self._wall()
        return state

    def balance(self, tenant: str, state: TenantLeases) -> int:
        """Leased tokens left; expired leases' remainders are handed back first."""
        for second, left in state.expire(self._wall()):
            self.unsent.owe(tenant, second, -left)
        return state.balance()

    def forget_idle(self) -> None:
        now = self._wall()
        for tenant, state in list(self._tenants.items()):
            if now - state.seen > FORGET_S and self.balance(tenant, state) == 0:
                del self._tenants[tenant]


class Unsent:
    """Tokens not yet written to Redis: charges owed to the leases hashes by (tenant, epoch
    second; negative: unspent leases handed back) and usage for dashboards by (tenant, epoch
    minute). Each buffer keeps at most BUFFER_LIMIT entries, the oldest dropped first
    (`dropped` counts them: their tokens are never charged)."""

    def __init__(self) -> None:
        self._owed: dict[Entry, int] = {}
        self._usage: dict[Entry, int] = {}
        self.dropped = 0

    def __len__(self) -> int:
        """(tenant, second) entries of charges not yet sent."""
        return len(self._owed)

    @property
    def empty(self) -> bool:
        """No charge and no usage waiting to be sent."""
        return not self._owed and not self._usage

    def owe(self, tenant: str, second: int, tokens: int) -> None:
        self.dropped += _add_bounded(self._owed, (tenant, second), tokens)

    def use(self, tenant: str, minute: int, tokens: int) -> None:
        self.dropped += _add_bounded(self._usage, (tenant, minute), tokens)

    def take_owed(self, now: int) -> Owed:
        """Owed tokens by tenant, for the seconds still inside the window; the buffer empties."""
        owed: Owed = {}
        for (tenant, second), tokens in self._owed.items():
            if second > now - WINDOW_S and tokens:
                owed.setdefault(tenant, []).append((second, tokens))
        self._owed = {}
        return owed

    def requeue(self, owed: Owed) -> None:
        """Put back what a failed round did not send, ahead of what came since."""
        newer, self._owed = self._owed, {}
        for tenant, pairs in owed.items():
            for second, tokens in pairs:
                self._owed[(tenant, second)] = tokens
        for key, tokens in newer.items():
            self.dropped += _add_bounded(self._owed, key, tokens)

    def take_usage(self, oldest_minute: int) -> dict[Entry, int]:
        """Usage of the minutes after `oldest_minute`; the buffer empties."""
        usage = {key: tokens for key, tokens in self._usage.items() if key[1] > oldest_minute}
        self._usage = {}
        return usage


def _add_bounded(entries: dict[Entry, int], key: Entry, tokens: int) -> int:
    """Add to an entry; at the bound the oldest entry goes. Returns entries dropped."""
    dropped = 0
    if key not in entries and len(entries) >= BUFFER_LIMIT:
        del entries[next(iter(entries))]
        dropped = 1
    entries[key] = entries.get(key, 0) + tokens
    return dropped
