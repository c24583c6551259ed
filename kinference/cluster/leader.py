"""One scrape leader per pool: engines are scraped once for the cluster, not N times.

A leader holds `leader:<pool>` (PX LEADER_TTL_MS) and renews it every second; when it dies,
the key expires and the next replica to ask takes over. A replica that cannot reach Redis
scrapes every pool itself (it cannot know who else does), as a standalone instance would.
"""

from __future__ import annotations

from collections.abc import Collection

from redis.exceptions import ResponseError

from kinference.cluster.connection import RedisClient, wrong_type
from kinference.cluster.keys import LEADER_TTL_MS, Keys

# Take the lease when free, renew it when ours; 1 = we lead.
_CLAIM = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""

_RESIGN = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class ScrapeLeadership:
    def __init__(self, redis: RedisClient, keys: Keys, instance: str) -> None:
        self._keys = keys
        self.instance = instance
        self._claim = redis.register_script(_CLAIM)
        self._resign = redis.register_script(_RESIGN)
        self.led: frozenset[str] = frozenset()

    async def claim(self, pools: Collection[str]) -> frozenset[str]:
        """Claim or renew each pool's lease; returns the pools this replica leads now. A
        lease key of another type (WRONGTYPE: set by hand, or by a tool sharing the prefix)
        is no one's: every replica leads that pool (scrapes it and shares what it reads),
        where failing the claim would read Redis as unavailable while the key lived."""
        led = set()
        for pool in sorted(pools):
            try:
                won = await self._claim(
                    keys=[self._keys.leader(pool)], args=[self.instance, LEADER_TTL_MS]
                )
            except ResponseError as error:
                if not wrong_type(error):
                    raise
                won = True
            if won:
                led.add(pool)
        self.led = frozenset(led)
        return self.led

    async def resign(self) -> None:
        for pool in self.led:
            try:
                await self._resign(keys=[self._keys.leader(pool)], args=[self.instance])
            except ResponseError as error:  # of another type: held by no one (`claim`)
                if not wrong_type(error):
                    raise
        self.led = frozenset()
