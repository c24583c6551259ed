"""Tenant token budgets across replicas: slices of the budget leased from Redis ahead of use.

Pick never waits on Redis: each replica spends budget it leased earlier (`sync_once`, in the
background), so the check is a local sum. Redis holds, per tenant, the tokens leased in each
epoch second (`Keys.leases`); a Lua script grants `min(want, limit - leased in the window)`.

Guarantees, for tokens reported before the next pick (as with the local gate):
- A replica admits while its balance (unexpired leases minus tokens spent from them) is
  positive, and then one request more until its next grant; whatever it spends beyond its
  leases is charged in Redis too. The cluster overshoots by at most one request per replica.
  A Pick that finds the balance and the credit spent before the lease round that follows
  has answered waits for that round (`answered`, at most LEASE_WAIT_S): a new tenant's
  second request is not refused for want of a lease nobody has refused yet.
- A lease is spendable for LEASE_LIFE_S and charged at the end of that life, so it stays in
  the window at least 60 s after any token spent from it; what is left unspent is handed back.
- Tokens are reserved at admission and settled at the final report (`kinference.routing.
  budget`): a refund goes back into a live lease, an overrun is charged like any spending
  beyond the leases. Tokens charged outside a lease go to the *next* epoch second, so the
  Redis window never lets a token go before 60 s.
- While Redis is unavailable (a `sync_once` raised), a replica spends its leases, then at most
  `limit / replicas` per sliding minute (`replicas`: the last count seen, or
  `expected_replicas` before any), or nothing with `fail_closed`. What it spent beyond its
  leases waits in a bounded buffer, charged when Redis answers again for the seconds still
  inside the window.
- A leases hash that vanished (an empty Redis restart) is re-seeded: each replica marks the
  hash with a field of its own; a call that finds its mark gone while this replica charged
  tokens in the window is granted nothing, and the next call sends those charges again.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from redis.exceptions import RedisError

from kinference.cluster.connection import RedisClient
from kinference.cluster.keys import LEASES_TTL_S, USAGE_TTL_S, Keys
from kinference.config.tenants import MAX_TRACKED_TENANTS
from kinference.routing.budget import WINDOW_S, TokenWindow

LEASE_LIFE_S = 10  # seconds a leased slice may be spent (must stay under LEASES_TTL_S - 60)
IDLE_S = 10.0  # seconds: a tenant unseen this long is not leased for any more
FORGET_S = 120.0  # seconds: an idle tenant's state (with no lease left) is dropped
RECOVER_S = 2  # seconds without grants after a lost leases hash (every replica re-seeds)
BUFFER_LIMIT = 10_000  # (tenant, second) entries of unpublished tokens kept while disconnected
LEASE_WAIT_S = 0.5  # seconds a Pick waits for the lease round it asked for, then is answered

# KEYS[1] leases hash. ARGV: now (epoch second), limit, want, charge second, TTL (s),
# replica mark field, whether this replica charged tokens in the window (1/0), then
# (second, tokens) pairs owed by this replica (negative: unspent leases handed back).
# Returns {granted, leased in the window, 1 if the mark was missing (the hash was lost)}.
# Once a replica found the hash lost, nothing is granted for RECOVER_S seconds, so that
# every replica has re-seeded its own charges before the sum is trusted again.
_LEASE_SCRIPT = """
local key, now, limit, want = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local oldest = now - 60
local lost = not redis.call('HGET', key, ARGV[6]) and ARGV[7] == '1'
redis.call('HSET', key, ARGV[6], 1)
if lost then redis.call('HSET', key, 'recovering', now + RECOVER_S) end
local recovering = tonumber(redis.call('HGET', key, 'recovering') or '0')
for i = 8, #ARGV, 2 do
  if tonumber(ARGV[i]) > oldest and redis.call('HINCRBY', key, ARGV[i], ARGV[i + 1]) <= 0 then
    redis.call('HDEL', key, ARGV[i])
  end
end
local sum = 0
local fields = redis.call('HGETALL', key)
for i = 1, #fields, 2 do
  local second = tonumber(fields[i])
  if second == nil then
  elseif second <= oldest then
    redis.call('HDEL', key, fields[i])
  else
    sum = sum + tonumber(fields[i + 1])
  end
end
local granted = 0
if not lost and now >= recovering then granted = math.max(math.min(want, limit - sum), 0) end
if granted > 0 then redis.call('HINCRBY', key, ARGV[4], granted); sum = sum + granted end
redis.call('EXPIRE', key, ARGV[5])
return {granted, sum, lost and 1 or 0}
""".replace("RECOVER_S", str(RECOVER_S))


@dataclass
class _Tenant:
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

    def charges_in_window(self, now: float) -> bool:
        while self.charged and self.charged[0][0] <= now - WINDOW_S:
            self.charged.popleft()
        return bool(self.charged)

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

    def spend(self, tokens: int) -> int:
        """Take `tokens` from the oldest pieces first; returns what they could not cover."""
        for piece in self.pieces:
            taken = min(piece[1], tokens)
            piece[1] -= taken
            tokens -= taken
        return tokens


def _add_bounded(entries: dict[tuple[str, int], int], key: tuple[str, int], tokens: int) -> int:
    """Add to an entry; at the bound the oldest entry goes. Returns entries dropped."""
    dropped = 0
    if key not in entries and len(entries) >= BUFFER_LIMIT:
        del entries[next(iter(entries))]
        dropped = 1
    entries[key] = entries.get(key, 0) + tokens
    return dropped


class LeasedBudget:
    """Implements `kinference.routing.budget.Budget` for a replica in a cluster.

    The node calls `sync_once` every ~100 ms (sooner when `wakeup` is set, but not more often
    than every ~10 ms); a round that raises marks the budget disconnected until a round
    succeeds (`set_connected` lets the node say so earlier). Picks never wait: everything but
    `sync_once` is synchronous and local.
    """

    def __init__(
        self,
        redis: RedisClient,
        keys: Keys,
        *,
        replicas: Callable[[], int],
        instance: str = "",
        fail_closed: bool = False,
        expected_replicas: int = 1,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._redis, self._keys = redis, keys
        self._replicas = replicas
        self._mark = f"replica:{instance}"  # this replica's mark field in each leases hash
        self._fail_closed = fail_closed
        self._expected_replicas = expected_replicas
        self._known_replicas = expected_replicas  # live replicas at the last such round
        self._clock = clock
        self._wall = wall
        self._script = redis.register_script(_LEASE_SCRIPT)
        self._tenants: dict[str, _Tenant] = {}
        self._owed: dict[tuple[str, int], int] = {}  # (tenant, epoch second) -> tokens
        self._usage: dict[tuple[str, int], int] = {}  # (tenant, epoch minute) -> tokens
        # (tenant, reserved at) -> (tokens drawn from leases, tokens charged beyond them)
        self._reserved: dict[tuple[str, float], tuple[int, int]] = {}
        self.connected = False  # until a command went through
        # Whether the last round failed: only then is Redis taken to be away (a replica that
        # has not tried yet admits one request, as when its leases ran out, not a share).
        self.offline = False
        self.dropped = 0  # buffered entries lost to BUFFER_LIMIT (their tokens uncharged)
        self.wakeup = asyncio.Event()  # set when a tenant wants a lease now
        self._rounds = 0  # lease rounds begun
        self._answered = 0  # the newest round that ended, answered or failed
        self._round_ended = asyncio.Event()  # set (and replaced) as each round ends

    def exhausted(self, tenant: str, limit: int) -> str | None:
        state = self._touch(tenant, limit)
        if self._balance(tenant, state) > 0:
            return None
        if not self.offline:
            if state.credit:  # this replica's one request beyond its leases
                self._spend_credit(state)
                return None
            return (
                f"used its budget: {limit} tokens per minute across replicas "
                f"({state.leased} leased in the last minute)"
            )
        if self._fail_closed:
            return "has a budget, and Redis (which keeps it) is unavailable"
        # The larger of the count at the last round that reached Redis, the live count and
        # the expected one: a restarted Redis has no heartbeats for a moment (the live count
        # reads 1: the whole budget for everyone), and a young replica has counted only those
        # that started before it.
        replicas = max(self._known_replicas, self._replicas(), self._expected_replicas)
        share = limit / replicas
        used = state.window.used(self._wall())
        if used < share:
            return None
        return f"used its share of the budget while Redis is away: {used} of {share:.0f} tokens"

    async def answered(self, tenant: str) -> None:
        """Wait, at most LEASE_WAIT_S, while `tenant` has nothing left to spend and the lease
        round asked for since has not ended (with a grant, a refusal or a failure)."""
        state = self._tenants.get(tenant)
        if state is None or not self._waiting(tenant, state):
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(LEASE_WAIT_S):
                while self._waiting(tenant, state):
                    await self._round_ended.wait()

    def _waiting(self, tenant: str, state: _Tenant) -> bool:
        unanswered = self._answered < state.asked and not self.offline
        return unanswered and not state.credit and self._balance(tenant, state) <= 0

    def _spend_credit(self, state: _Tenant) -> None:
        """The one request beyond the leases is taken: the next round that begins leases."""
        state.credit, state.asked = False, self._rounds + 1
        self.wakeup.set()

    def frees_in(self, tenant: str, limit: int) -> float | None:
        """While Redis answers: when this replica's own charges leave the leases window far
        enough for a grant (others' charges leaving first only make it sooner; the next
        lease round, within a tenth of a second, then grants). Offline: when its share
        frees in its own window. None: cannot tell."""
        state = self._tenants.get(tenant)
        if state is None:
            return None
        now = self._wall()
        if self.offline:
            replicas = max(self._known_replicas, self._replicas(), self._expected_replicas)
            return state.window.frees_in(now, math.ceil(limit / replicas))
        excess = state.leased - limit + 1  # a grant needs the window's sum under the limit
        for second, tokens in sorted(state.charged):
            excess -= tokens
            if excess <= 0:  # the script drops a second once it is 60 s old
                return max(second + WINDOW_S - now, 0.0)
        return None

    def used(self, tenant: str) -> int:
        """Tokens this replica recorded for `tenant` in the last minute."""
        state = self._tenants.get(tenant)
        return 0 if state is None else state.window.used(self._wall())

    def reserve(self, tenant: str, limit: int, tokens: int) -> float:
        state = self._touch(tenant, limit)
        now = self._wall()
        while (tenant, now) in self._reserved:  # one entry per reservation
            now = math.nextafter(now, math.inf)
        state.window.add(now, tokens)
        self._reserved[(tenant, now)] = self._charge(tenant, state, now, tokens)
        return now

    def adjust(self, tenant: str, limit: int, at: float, tokens: int) -> None:
        state = self._touch(tenant, limit)
        now = self._wall()
        state.window.adjust(at, tokens)
        drawn, beyond = self._reserved.pop((tenant, at), (0, 0))
        if tokens > 0:
            self._charge(tenant, state, now, tokens)
            return
        self.dropped += _add_bounded(self._usage, (tenant, int(now // 60)), tokens)
        back = -tokens
        # Hand back what was charged beyond the leases first (in the second it was charged
        # to), then into a live lease what was drawn from one; anything else stays charged.
        from_beyond = min(back, beyond)
        if from_beyond:
            self.dropped += _add_bounded(self._owed, (tenant, int(at) + 1), -from_beyond)
        self._balance(tenant, state)
        state.refund(min(back - from_beyond, drawn))

    def forget_idle(self) -> None:
        """Idle tenants are forgotten by `sync_once` (they may hold leases to hand back)."""

    def record(self, tenant: str, limit: int, tokens: int) -> None:
        """Count reported tokens without a reservation (a reservation never settled)."""
        self._reserved.pop((tenant, self.reserve(tenant, limit, tokens)), None)

    def _charge(self, tenant: str, state: _Tenant, now: float, tokens: int) -> tuple[int, int]:
        """Spend `tokens` from the leases, the rest charged beyond them; returns both."""
        self._balance(tenant, state)
        beyond = state.spend(tokens)
        if beyond > 0:  # charged in Redis from the next second on: never leaves early
            if state.credit:
                self._spend_credit(state)
            state.overshot = True
            self.dropped += _add_bounded(self._owed, (tenant, int(now) + 1), beyond)
        self.dropped += _add_bounded(self._usage, (tenant, int(now // 60)), tokens)
        if self._want(state, now):
            self.wakeup.set()
        return tokens - beyond, beyond

    def balance(self, tenant: str) -> int:
        """Leased tokens this replica may still spend for `tenant`."""
        state = self._tenants.get(tenant)
        return 0 if state is None else self._balance(tenant, state)

    def buffered(self) -> int:
        """(tenant, second) entries of tokens not yet charged in Redis."""
        return len(self._owed)

    def set_connected(self, connected: bool) -> None:
        """Whether Redis answers (also set by each `sync_once`): while it does not, a tenant
        without leases left gets `limit / replicas` per minute instead of one request."""
        self.connected, self.offline = connected, not connected

    async def sync_once(self) -> None:
        """One round: charge owed tokens and lease slices (one EVALSHA per tenant that needs
        it), then write usage for dashboards. Raises RedisError or OSError. While disconnected,
        a round with nothing to send PINGs, so the budget learns that Redis is back."""
        self.wakeup.clear()
        self._rounds += 1
        number = self._rounds
        try:
            sent = await self._lease_round()
            sent = await self._publish_usage() or sent
            if not sent and not self.connected:
                await self._redis.ping()
                sent = True
        except (RedisError, OSError):
            self.connected, self.offline = False, True
            raise
        finally:
            self._answered = max(self._answered, number)
            ended, self._round_ended = self._round_ended, asyncio.Event()
            ended.set()
        if sent:  # only a command that went through tells Redis answers
            self.connected, self.offline = True, False
            self._known_replicas = self._replicas()
        self._forget_idle()

    async def _lease_round(self) -> bool:
        now = self._wall()
        for name, known in self._tenants.items():
            self._balance(name, known)  # hands back expired leases in this round
        owed = self._take_owed(int(now))
        wanting = [name for name, state in self._tenants.items() if self._want(state, now)]
        reseeding = [name for name, state in self._tenants.items() if state.reseed]
        tenants = dict.fromkeys([*owed, *wanting, *reseeding])
        for tenant in tenants:
            state = self._tenants.get(tenant)
            pairs = owed.get(tenant, [])
            if state is not None:
                state.overshot = False
            try:
                granted = await self._lease(tenant, state, pairs, now)
            except BaseException:
                self._requeue(owed)
                if state is not None:
                    state.overshot = state.overshot or any(tokens > 0 for _, tokens in pairs)
                raise
            owed.pop(tenant, None)
            if state is not None and granted > 0:
                state.pieces.append([int(now) + LEASE_LIFE_S, granted])
                state.credit = state.credit or not state.overshot
        return bool(tenants)

    async def _lease(
        self, tenant: str, state: _Tenant | None, pairs: list[tuple[int, int]], now: float
    ) -> int:
        want = 0 if state is None else self._want(state, now)
        limit = 0 if state is None else state.limit
        reseed = [] if state is None else state.reseed
        charged = state is not None and state.charges_in_window(now)
        args = [int(now), limit, want, int(now) + LEASE_LIFE_S, LEASES_TTL_S, self._mark]
        args.append(int(charged))
        sent = [*reseed, *pairs]
        args += [number for pair in sent for number in pair]  # second, tokens, second, ...
        granted, leased, lost = await self._script(keys=[self._keys.leases(tenant)], args=args)
        if state is None:
            return 0
        state.reseed = []
        state.charged.extend(pairs)
        if int(lost):  # the hash was gone: send this replica's charges in the window again
            state.reseed = [(sec, tokens) for sec, tokens in state.charged if sec > now - 60]
            self.wakeup.set()
        if int(granted) > 0:
            state.charged.append((int(now) + LEASE_LIFE_S, int(granted)))
        state.leased = int(leased)
        return int(granted)

    async def _publish_usage(self) -> bool:
        oldest = int(self._wall() // 60) - USAGE_TTL_S // 60
        usage = {key: tokens for key, tokens in self._usage.items() if key[1] > oldest}
        self._usage = {}
        if not usage:
            return False
        pipe = self._redis.pipeline(transaction=False)
        for (tenant, minute), tokens in usage.items():
            pipe.hincrby(self._keys.usage(tenant), str(minute), tokens)
            pipe.expire(self._keys.usage(tenant), USAGE_TTL_S)
        pipe.sadd(self._keys.tenants(), *{tenant for tenant, _ in usage})
        pipe.expire(self._keys.tenants(), USAGE_TTL_S)
        pipe.scard(self._keys.tenants())
        try:
            *_, members = await pipe.execute()
            if int(members) > MAX_TRACKED_TENANTS:  # churned names: drop some at random
                await self._redis.spop(self._keys.tenants(), int(members) - MAX_TRACKED_TENANTS)
        except BaseException:
            for key, tokens in usage.items():
                self.dropped += _add_bounded(self._usage, key, tokens)
            raise
        return True

    def _touch(self, tenant: str, limit: int) -> _Tenant:
        state = self._tenants.get(tenant)
        if state is None:
            state = self._tenants[tenant] = _Tenant(limit, self._wall())
        state.limit, state.seen = limit, self._wall()
        return state

    def _balance(self, tenant: str, state: _Tenant) -> int:
        for second, left in state.expire(self._wall()):
            self.dropped += _add_bounded(self._owed, (tenant, second), -left)
        return state.balance()

    def _want(self, state: _Tenant, now: float) -> int:
        """Tokens to lease for a tenant in use whose balance is under half a slice."""
        if now - state.seen > IDLE_S:
            return 0
        if state.reseed:  # the first call after a lost hash only sends the charges again
            return 0
        size = max(state.limit // (4 * max(self._replicas(), 1)), 1)
        return size if 2 * state.balance() < size else 0

    def _take_owed(self, now: int) -> dict[str, list[tuple[int, int]]]:
        """Owed tokens by tenant, for the seconds still inside the window; the buffer empties."""
        owed: dict[str, list[tuple[int, int]]] = {}
        for (tenant, second), tokens in self._owed.items():
            if second > now - WINDOW_S and tokens:
                owed.setdefault(tenant, []).append((second, tokens))
        self._owed = {}
        return owed

    def _requeue(self, owed: dict[str, list[tuple[int, int]]]) -> None:
        """Put back what a failed round did not send, ahead of what came since."""
        newer, self._owed = self._owed, {}
        for tenant, pairs in owed.items():
            for second, tokens in pairs:
                self._owed[(tenant, second)] = tokens
        for key, tokens in newer.items():
            self.dropped += _add_bounded(self._owed, key, tokens)

    def _forget_idle(self) -> None:
        now = self._wall()
        for tenant, state in list(self._tenants.items()):
            if now - state.seen > FORGET_S and self._balance(tenant, state) == 0:
                del self._tenants[tenant]
