import asyncio, time
from kinference.cluster.connection import connect
from kinference.cluster.keys import Keys
from kinference.cluster.outbox import Outbox
from kinference.cluster.replication import Publisher
from kinference.cluster.stats import StatsBuffer
from loadtest.redis_server import RedisServer


async def main():
    server = RedisServer().start()
    client = connect(server.url)
    K = Keys()
    await client.set(K.engines(), b"x")
    outbox = Outbox()
    pub = Publisher(
        client, K, "l", outbox, own_load=dict, stats=StatsBuffer(client, K, "l"), maxlen=1000
    )
    outbox.engine("10.0.0.1:8000", {"at": time.time(), "ready": True, "read": True})
    outbox.first_token("10.0.0.1:8000", "m", 80.0)
    for _ in range(5):
        try:
            await pub.flush()
        except Exception as e:
            pass
    print("entries", await client.xlen(K.events()))
    await client.aclose()
    server.stop()


asyncio.run(main())
