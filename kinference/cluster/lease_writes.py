"""What the leased tenant budgets (`cluster/leases.py`) write to Redis: the lease script,
which charges a replica's owed tokens and grants a slice in one atomic call per tenant
(`Keys.leases`), and the per-minute usage hashes for dashboards (`Keys.usage`, with the set
of tenants seen, `Keys.tenants`, bounded by MAX_TRACKED_TENANTS).
"""

from __future__ import annotations

from kinference.cluster.connection import RedisClient
from kinference.cluster.keys import LEASES_TTL_S, USAGE_TTL_S, Keys
from kinference.cluster.lease_state import Unsent
from kinference.config.tenants import MAX_TRACKED_TENANTS

RECOVER_S = 2  # seconds without grants after a lost leases hash (every replica re-seeds)

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


class LeaseScript:
    """The lease script, registered once (EVALSHA, loaded again after a Redis restart)."""

    def __init__(self, redis: RedisClient, keys: Keys) -> None:
        self._script = redis.register_script(_LEASE_SCRIPT)
        self._keys = keys

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
        sent: list[tuple[int, int]],
    ) -> tuple[int, int, bool]:
        """Charge `sent` (second, tokens) and ask for `want` tokens charged to
        `charge_second`; returns (granted, leased in the window, whether the hash was lost)."""
        args: list[int | str] = [int(now), limit, want, charge_second, LEASES_TTL_S, mark]
        args.append(int(charged))
        args += [number for pair in sent for number in pair]  # second, tokens, second, ...
        granted, leased, lost = await self._script(keys=[self._keys.leases(tenant)], args=args)
        return int(granted), int(leased), bool(int(lost))


class UsageWriter:
    """Adds the buffered usage to the per-minute usage hashes."""

    def __init__(self, redis: RedisClient, keys: Keys) -> None:
        self._redis, self._keys = redis, keys

    async def publish(self, unsent: Unsent, now: float) -> bool:
        """Write the usage of the minutes still kept; returns whether there was any. On a
        failure the usage goes back into `unsent` and the error is raised."""
        usage = unsent.take_usage(int(now // 60) - USAGE_TTL_S // 60)
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
            unsent.keep_usage(usage)
            raise
        return True
