"""Stream entries deleted or trimmed before a reader got to them, their writer idle since.

A reader finds entries it missed by the jump in their writer's sequence numbers at that
writer's next entry; a writer that publishes nothing more (its requests held, no new
Picks) never showed the gap, and the reader kept its old load for as long as it stayed
idle (h199: 0 of 3 held requests seen for the test's whole deadline). Now the membership
check re-reads every live replica's load hash now and then and takes one that is newer
than what its view accounts for.
"""

from __future__ import annotations

import pytest

from loadtest.redis_server import RedisServer
from tests.api.helpers import chat_body, pick_ok, wait_until
from tests.cluster.test_replication import POOL, POOL_STREAM, flushed, load, total

DEADLINE_S = 15.0


@pytest.mark.parametrize("removal", ["xdel", "xtrim"])
async def test_entries_removed_before_they_were_read_are_made_up_for(
    removal: str, start_replicas, redis_server: RedisServer
) -> None:
    a, b = await start_replicas(2)
    assert a.app.cluster is not None and b.app.cluster is not None
    instance = a.app.cluster.instance
    shard = b.app.cluster.shard(POOL)
    await wait_until(lambda: instance in shard.view.seq, DEADLINE_S, "b applied an entry of a")
    await b.app.cluster.suspend("read")
    held = [await pick_ok(a, chat_body(content=f"held {n}")) for n in range(3)]
    await wait_until(lambda: flushed(redis_server, a) == 3, DEADLINE_S, "a's picks published")
    if removal == "xdel":
        last = shard.reader.last_id
        unread = redis_server.cli("EVAL", _UNREAD, "1", POOL_STREAM, last)
        assert unread != "0"
    else:
        redis_server.cli("XTRIM", POOL_STREAM, "MAXLEN", "0")
    b.app.cluster.resume("read")
    await wait_until(lambda: total(b) == 3, DEADLINE_S, "b sees a's held requests")
    assert load(b) == load(a)
    for pick in held:
        await a.client.final_token(pick.response_id)
    await wait_until(lambda: total(b) == 0, DEADLINE_S, "b sees the releases")


# XDEL every entry after ARGV[1] (those the suspended reader has not read); returns how many.
_UNREAD = """
local ids = {}
for _, entry in ipairs(redis.call('XRANGE', KEYS[1], '(' .. ARGV[1], '+')) do
  ids[#ids + 1] = entry[1]
end
if #ids == 0 then return 0 end
return redis.call('XDEL', KEYS[1], unpack(ids))
"""
