"""What the leased tenant budgets (`cluster/leases.py`) write to Redis: the lease script,
which charges a replica's owed tokens and grants a slice in one atomic call per tenant
(`Keys.leases`), and the per-minute usage hashes for dashboards (`Keys.usage`, with the set
of tenants seen, `Keys.tenants`, bounded by MAX_TRACKED_TENANTS).
"""

from __future__ import annotations

import itertools
import logging
import secrets

from kinference.cluster.connection import RedisClient
from kinference.cluster.keys import LEASES_TTL_S, USAGE_TTL_S, Keys
from kinference.cluster.lease_state import LEASE_LIFE_S, LeaseCall, TenantLeases, Unsent
from kinference.config.tenants import MAX_TRACKED_TENANTS

log = logging.getLogger(__name__)

RECOVER_S = 2  # seconds without grants after a lost leases hash (every replica re-seeds)

# KEYS[1] leases hash. ARGV: now (epoch second), limit, want, charge second, TTL (s),
# replica mark field, whether this replica charged tokens in the window (1/0), the call's
# id, then (second, tokens) pairs owed by this replica (negative: unspent leases handed
# back). Returns {granted, leased in the window, 1 if the mark was missing (the hash was
# lost)}. Once a replica found the hash lost, nothing is granted for RECOVER_S seconds, so
# that every replica has re-seeded its own charges before the sum is trusted again. The
# mark holds `<call id>:<granted>` of the replica's last call: a call sent again because
# its answer was lost (applied, or not) is applied once and answers its grant again. A key
# of another type (set by hand, or by a tool sharing the prefix) is left alone: {0, 0, 0, 1}.
_LEASE_SCRIPT = """
local key, now, limit, want = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local oldest = now - 60
local prior = redis.pcall('HGET', key, ARGV[6])
if type(prior) == 'table' and prior.err then
  if string.find(prior.err, 'WRONGTYPE', 1, true) then return {0, 0, 0, 1} end
  error(prior)
end
local replay = prior and string.sub(prior, 1, #ARGV[8] + 1) == ARGV[8] .. ':'
local lost = not prior and ARGV[7] == '1'
if lost then redis.call('HSET', key, 'recovering', now + RECOVER_S) end
local recovering = tonumber(redis.call('HGET', key, 'recovering') or '0')
for i = 9, #ARGV, 2 do
  if not replay and tonumber(ARGV[i]) > oldest
      and redis.call('HINCRBY', key, ARGV[i], ARGV[i + 1]) <= 0 then
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
if replay then granted = tonumber(string.sub(prior, #ARGV[8] + 2))
elseif not lost and now >= recovering then granted = math.max(math.min(want, limit - sum), 0) end
if granted > 0 and not replay then
  redis.call('HINCRBY', key, ARGV[4], granted)
  sum = sum + granted
end
redis.call('HSET', key, ARGV[6], ARGV[8] .. ':' .. granted)
redis.call('EXPIRE', key, ARGV[5])
return {granted, sum, lost and 1 or 0, 0}
""".replace("RECOVER_S", str(RECOVER_S))


class LeaseScript:
    """The lease script, registered once (EVALSHA, loaded again after a Redis restart)."""

    def __init__(self, redis: RedisClient, keys: Keys, mark: str = "replica:") -> None:
        self._script = redis.register_script(_LEASE_SCRIPT)
        self._keys = keys
        self._mark = mark  # this replica's mark field in each leases hash
        # Tenants whose leases key is of another type: budgeted locally (their offline
        # share) until it is gone; failing on it, every tenant's round failed while it lived.
        self.foreign: set[str] = set()
        # Call ids: unique to this budget even where replicas share a mark (no instance id).
        self._ids = (f"{secrets.token_hex(4)}.{n}" for n in itertools.count(1))

    def next_id(self) -> str:
        return next(self._ids)

    async def lease(
        self,
        tenant: str,
        *,
        now: float,
        limit: int,
        want: int,
        charge_second: int,
        mark: str,
        charged: bool,
        call: str,
        sent: list[tuple[int, int]],
    ) -> tuple[int, int, bool]:
        """Charge `sent` (second, tokens) and ask for `want` tokens charged to
        `charge_second`; returns (granted, leased in the window, whether the hash was lost).
        `call` names the call: sent again under it, it is applied once."""
        args: list[int | str] = [int(now), limit, want, charge_second, LEASES_TTL_S, mark]
        args += [int(charged), call]
        args += [number for pair in sent for number in pair]  # second, tokens, second, ...
        key = self._keys.leases(tenant)
        granted, leased, lost, foreign = await self._script(keys=[key], args=args)
        if int(foreign) and tenant not in self.foreign:
            log.warning("%s is not a hash: %s's budget is kept by this replica alone", key, tenant)
        (self.foreign.add if int(foreign) else self.foreign.discard)(tenant)
        return int(granted), int(leased), bool(int(lost))

    async def call(
        self, tenant: str, state: TenantLeases | None, now: float, call: LeaseCall, *,
        replicas: int,
    ) -> tuple[int, int, bool]:  # fmt: skip
        """`lease` for one call of a tenant's state (None: forgotten meanwhile, charges only)."""
        return await self.lease(
            tenant,
            now=now,
            limit=0 if state is None else state.limit,
            want=0 if state is None else state.want(now, replicas),
            charge_second=int(now) + LEASE_LIFE_S,
            mark=self._mark,
            charged=state is not None and state.charges_in_window(now),
            call=call.id,
            sent=call.sent,
        )


# KEYS[1] this replica's last usage batch applied, KEYS[2] the tenants set, KEYS[3..] usage
# hashes. ARGV: batch id, TTL, then per usage hash its minute, tokens and tenant. A batch
# whose id is the last applied was applied already (its reply was lost): -1, nothing added.
# A key of another type is skipped (a WRONGTYPE halfway failed the batch after part of it
# was added, and that part was added again at each retry).
_USAGE_SCRIPT = """
local function ours(...)  -- whether a read of its key succeeds (not: of another type)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply.err then
    if string.find(reply.err, 'WRONGTYPE', 1, true) then return false end
    error(reply)
  end
  return true
end
local batch, tracked = ours('GET', KEYS[1]), ours('SCARD', KEYS[2])
if batch and redis.call('GET', KEYS[1]) == ARGV[1] then return -1 end
for i = 3, #KEYS do
  local at = 3 * i - 6
  if ours('HGET', KEYS[i], ARGV[at]) then
    redis.call('HINCRBY', KEYS[i], ARGV[at], ARGV[at + 1])
    redis.call('EXPIRE', KEYS[i], ARGV[2])
  end
  if tracked then redis.call('SADD', KEYS[2], ARGV[at + 2]) end
end
if batch then redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2]) end
if not tracked then return 0 end
redis.call('EXPIRE', KEYS[2], ARGV[2])
return redis.call('SCARD', KEYS[2])
"""


class UsageWriter:
    """Adds the buffered usage to the per-minute usage hashes, each batch once: a batch
    whose write failed (refused, or its reply lost although Redis applied it) is sent again
    unchanged, under its id, before anything newer."""

    def __init__(self, redis: RedisClient, keys: Keys, instance: str = "") -> None:
        self._redis, self._keys, self._instance = redis, keys, instance
        self._script = redis.register_script(_USAGE_SCRIPT)
        self._batches = 0
        self._doubt: tuple[str, dict[tuple[str, int], int]] | None = None  # failed to send

    async def publish(self, unsent: Unsent, now: float) -> bool:
        """Write the usage of the minutes still kept; returns whether there was any. Raises
        on a failure (the batch is sent again, unchanged, at the next call)."""
        sent = False
        if self._doubt is not None:
            await self._write(*self._doubt)
            self._doubt, sent = None, True
        usage = unsent.take_usage(int(now // 60) - USAGE_TTL_S // 60)
        if not usage:
            return sent
        self._batches += 1
        batch = f"{self._batches}"
        try:
            await self._write(batch, usage)
        except BaseException:
            self._doubt = (batch, usage)
            raise
        return True

    async def _write(self, batch: str, usage: dict[tuple[str, int], int]) -> None:
        keys = [self._keys.usage_batch(self._instance), self._keys.tenants()]
        args: list[str | int] = [batch, USAGE_TTL_S]
        for (tenant, minute), tokens in usage.items():
            keys.append(self._keys.usage(tenant))
            args += [str(minute), tokens, tenant]
        members = int(await self._script(keys=keys, args=args))
        if members > MAX_TRACKED_TENANTS:  # churned names: drop some at random
            await self._redis.spop(self._keys.tenants(), members - MAX_TRACKED_TENANTS)
