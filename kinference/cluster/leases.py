"""Tenant token budgets across replicas: slices of the budget leased from Redis ahead of use.

Pick never waits on Redis: each replica spends budget it leased earlier (`sync_once`, in the
background), so the check is a local sum. Redis holds, per tenant, the tokens leased in each
epoch second (`Keys.leases`); a Lua script grants `min(want, limit - leased in the window)`.

Guarantees, for tokens reported before the next pick (as with the local gate):
- A replica admits while its balance (unexpired leases minus tokens spent from them) is
  positive, and then one request more until its next grant (charged in Redis too): the
  cluster overshoots by at most one request per replica. A Pick that finds both spent
  before the lease round that follows has answered waits for it (`answered`, at most
  LEASE_WAIT_S): a new tenant's second request is not refused for want of a lease.
- A lease is spendable for LEASE_LIFE_S and charged at the end of that life, so it stays in
  the window at least 60 s after any token spent from it; what is left unspent is handed back.
- Tokens are reserved at admission and settled at the final report (`routing.budget`): a
  refund goes back into a live lease, an overrun is charged beyond the leases, to the *next*
  epoch second (the Redis window never lets a token go before 60 s).
- While Redis is unavailable (a `sync_once` raised), a replica spends its leases, then at most
  `limit / replicas` per sliding minute (`replicas`: the last count seen, or
  `expected_replicas` before any), or nothing with `fail_closed`. What it spent beyond its
  leases waits in a bounded buffer, charged when Redis is back (seconds still in the window).
- A leases hash that vanished (an empty Redis restart) is re-seeded: each replica marks the
  hash with a field of its own; a call that finds its mark gone while this replica charged
  tokens in the window is granted nothing, and the next call sends those charges again.
  After a failure the first round to reach Redis calls for every tenant charged in the
  window, re-seeding a hash nothing else calls for (limits: docs/redis.md). A failed call
  goes again as it was, before the next: applied once (`lease_writes`).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable

from redis.exceptions import RedisError

from kinference.cluster.connection import RedisClient
from kinference.cluster.keys import Keys
from kinference.cluster.lease_state import LeaseBook, LeaseCall, TenantLeases
from kinference.cluster.lease_writes import LeaseScript, UsageWriter

LEASE_WAIT_S = 0.5  # seconds a Pick waits for the lease round it asked for, then is answered


class LeasedBudget:
    """Implements `kinference.routing.budget.Budget` for a replica in a cluster.

    The node calls `sync_once` every ~100 ms (every few seconds while `idle`; sooner, but
    not more often than every ~10 ms, when `wakeup` is set); a round that raises marks the
    budget disconnected until a round succeeds (`set_connected`: the node says so earlier).
    Picks never wait: everything but `sync_once` is synchronous and local.
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
        self._redis = redis
        self._replicas = replicas
        self._fail_closed = fail_closed
        self._expected_replicas = expected_replicas
        self._known_replicas = expected_replicas  # live replicas at the last such round
        self._wall = wall
        self._script = LeaseScript(redis, keys, f"replica:{instance}")  # its mark field
        self._usage = UsageWriter(redis, keys, instance)
        self.wakeup = asyncio.Event()  # set when a tenant wants a lease now (or is new)
        self._book = LeaseBook(wall, on_new=self.wakeup.set)
        self._unsent = self._book.unsent
        # (tenant, reserved at) -> (tokens drawn from leases, tokens charged beyond them)
        self._reserved: dict[tuple[str, float], tuple[int, int]] = {}
        self.connected = False  # until a command went through
        # Whether the last round failed: only then is Redis taken to be away (a replica that
        # has not tried yet admits one request, as when its leases ran out, not a share).
        self.offline = False
        self._rounds, self._recheck = 0, False  # lease rounds begun; a failure since (module doc)
        self._answered = 0  # the newest round that ended, answered or failed
        self._round_ended = asyncio.Event()  # set (and replaced) as each round ends

    @property
    def idle(self) -> bool:  # no tenant known, nothing unsent, Redis answering
        return self.connected and self._book.empty and self._unsent.empty

    def exhausted(self, tenant: str, limit: int) -> str | None:
        state = self._book.touch(tenant, limit)
        if self._book.balance(tenant, state) > 0:
            return None
        if not self._away(tenant):
            if state.credit:  # this replica's one request beyond its leases
                self._spend_credit(state)
                return None
            return (
                f"used its budget: {limit} tokens per minute across replicas "
                f"({state.leased} leased in the last minute)"
            )
        if self._fail_closed:
            return "has a budget, and Redis (which keeps it) is unavailable"
        # The largest of the count at the last round that reached Redis, the live count (1 for a
        # moment after a restart) and the expected one (a young replica has counted few).
        replicas = max(self._known_replicas, self._replicas(), self._expected_replicas)
        share = limit / replicas
        used = state.window.used(self._wall())
        if used < share:
            return None
        away = "Redis is away" if self.offline else "its leases key is not a hash"
        return f"used its share of the budget while {away}: {used} of {share:.0f} tokens"

    def _away(self, tenant: str) -> bool:  # or its leases key is of another type
        return self.offline or tenant in self._script.foreign

    async def answered(self, tenant: str) -> None:
        """Wait, at most LEASE_WAIT_S, while `tenant` has nothing left to spend and the lease
        round asked for since has not ended (with a grant, a refusal or a failure)."""
        state = self._book.get(tenant)
        if state is None or not self._waiting(tenant, state):
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(LEASE_WAIT_S):
                while self._waiting(tenant, state):
                    await self._round_ended.wait()

    def _waiting(self, tenant: str, state: TenantLeases) -> bool:
        unanswered = self._answered < state.asked and not self._away(tenant)
        return unanswered and not state.credit and self._book.balance(tenant, state) <= 0

    def _spend_credit(self, state: TenantLeases) -> None:
        """The one request beyond the leases is taken: the next round that begins leases."""
        state.credit, state.asked = False, self._rounds + 1
        self.wakeup.set()

    def frees_in(self, tenant: str, limit: int) -> float | None:
        """Online: when this replica's own charges leave the window enough for a grant (the
        next round then grants; others' leaving first make it sooner). Offline: when its
        share frees in its own window. None: cannot tell."""
        state = self._book.get(tenant)
        if state is None:
            return None
        now = self._wall()
        if self._away(tenant):
            replicas = max(self._known_replicas, self._replicas(), self._expected_replicas)
            return state.window.frees_in(now, math.ceil(limit / replicas))
        return state.charges_leave_in(now, limit)

    def used(self, tenant: str) -> int:
        """Tokens this replica recorded for `tenant` in the last minute."""
        state = self._book.get(tenant)
        return 0 if state is None else state.window.used(self._wall())

    def reserve(self, tenant: str, limit: int, tokens: int) -> float:
        state = self._book.touch(tenant, limit)
        now = self._wall()
        while (tenant, now) in self._reserved:  # one entry per reservation
            now = math.nextafter(now, math.inf)
        state.window.add(now, tokens)
        self._reserved[(tenant, now)] = self._charge(tenant, state, now, tokens)
        return now

    def adjust(self, tenant: str, limit: int, at: float, tokens: int) -> None:
        state = self._book.touch(tenant, limit)
        now = self._wall()
        state.window.adjust(at, tokens)
        drawn, beyond = self._reserved.pop((tenant, at), (0, 0))
        if tokens > 0:
            self._charge(tenant, state, now, tokens)
            return
        self._unsent.use(tenant, int(now // 60), tokens)
        back = -tokens
        # Hand back what was charged beyond the leases first (in the second it was charged
        # to), then into a live lease what was drawn from one; anything else stays charged.
        from_beyond = min(back, beyond)
        if from_beyond:
            self._unsent.owe(tenant, int(at) + 1, -from_beyond)
        self._book.balance(tenant, state)
        state.refund(min(back - from_beyond, drawn))

    def forget_idle(self) -> None:
        """Idle tenants are forgotten by `sync_once` (they may hold leases to hand back)."""

    def record(self, tenant: str, limit: int, tokens: int) -> None:
        """Count reported tokens without a reservation (a reservation never settled)."""
        self._reserved.pop((tenant, self.reserve(tenant, limit, tokens)), None)

    def _charge(self, tenant: str, state: TenantLeases, now: float, tokens: int) -> tuple[int, int]:
        """Spend `tokens` from the leases, the rest charged beyond them; returns both."""
        self._book.balance(tenant, state)
        beyond = state.spend(tokens)
        if beyond > 0:  # charged in Redis from the next second on: never leaves early
            if state.credit:
                self._spend_credit(state)
            state.overshot = True
            self._unsent.owe(tenant, int(now) + 1, beyond)
        self._unsent.use(tenant, int(now // 60), tokens)
        if state.want(now, self._replicas()):
            self.wakeup.set()
        return tokens - beyond, beyond

    def balance(self, tenant: str) -> int:
        """Leased tokens this replica may still spend for `tenant`."""
        state = self._book.get(tenant)
        return 0 if state is None else self._book.balance(tenant, state)

    def buffered(self) -> int:
        """(tenant, second) entries of tokens not yet charged in Redis."""
        return len(self._unsent)

    @property
    def dropped(self) -> int:
        """Buffered entries lost to the buffer's bound (their tokens never charged)."""
        return self._unsent.dropped

    def set_connected(self, connected: bool) -> None:
        """Whether Redis answers (also set by each `sync_once`): while it does not, a tenant
        without leases left gets its offline share instead of one request."""
        self.connected, self.offline = connected, not connected
        if not connected:
            self._recheck = True
            self.wakeup.set()  # an idle loop starts its rounds (each PINGs) again

    async def sync_once(self) -> None:
        """One round: charge owed tokens and lease slices (an EVALSHA per tenant needing it),
        then write usage. Raises RedisError or OSError; disconnected, an empty round PINGs."""
        self.wakeup.clear()
        self._rounds += 1
        number = self._rounds
        try:
            sent = await self._lease_round()
            sent = await self._usage.publish(self._unsent, self._wall()) or sent
            if not sent and not self.connected:
                await self._redis.ping()
                sent = True
        except (RedisError, OSError):
            self.connected, self.offline, self._recheck = False, True, True
            raise
        finally:
            self._answered = max(self._answered, number)
            ended, self._round_ended = self._round_ended, asyncio.Event()
            ended.set()
        if sent:  # only a command that went through tells Redis answers
            self.connected, self.offline = True, False
            self._known_replicas = self._replicas()
        self._book.forget_idle()

    async def _lease_round(self) -> bool:
        now = self._wall()
        replicas = self._replicas()
        for name, known in self._book:
            self._book.balance(name, known)  # hands back expired leases in this round
        owed = self._unsent.take_owed(int(now))
        recheck = self._recheck  # every tenant charged in the window (module doc)
        calls = [n for n, state in self._book if state.want(now, replicas) or state.reseed or (
            recheck and state.charges_in_window(now))]  # fmt: skip
        tenants = dict.fromkeys([*owed, *calls])
        for tenant in tenants:
            state = self._book.get(tenant)
            pairs = owed.get(tenant, [])
            if state is not None:
                state.overshot = False
            try:
                await self._lease(tenant, state, pairs, now)
            except BaseException:
                if state is not None and state.doubt is not None and state.doubt.pairs is pairs:
                    owed.pop(tenant, None)  # sent again as they were, not with newer ones
                self._unsent.requeue(owed)
                if state is not None:
                    state.overshot = state.overshot or any(tokens > 0 for _, tokens in pairs)
                raise
            owed.pop(tenant, None)
        self._recheck = False
        return bool(tenants)

    async def _lease(
        self, tenant: str, state: TenantLeases | None, pairs: list[tuple[int, int]], now: float
    ) -> None:
        """One tenant's charges and lease, after its failed call if any, sent again as it was
        (applied once: its answer may have been lost after Redis applied it)."""
        if state is not None and state.doubt is not None:
            await self._call(tenant, state, now, state.doubt)
        sent = [*([] if state is None else state.reseed), *pairs]
        await self._call(tenant, state, now, LeaseCall(self._script.next_id(), sent, pairs))

    async def _call(
        self, tenant: str, state: TenantLeases | None, now: float, call: LeaseCall
    ) -> None:
        try:
            answer = await self._script.call(tenant, state, now, call, replicas=self._replicas())
        except BaseException:
            if state is not None:
                state.doubt = call
            raise
        if state is not None:
            state.doubt = None
            if state.settle(call.pairs, answer, now):
                self.wakeup.set()  # the charges go again in the next round
