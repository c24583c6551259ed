"""A publisher flooding valid large batches at a subscriber: the subscriber's RSS over time."""

import asyncio, os, sys, time, subprocess

sys.path.insert(0, "/work/wt/h191")
import zmq, zmq.asyncio
from tests.kvevents import vllm_format as vllm

PORT = 45817


def rss() -> int:
    return int(open(f"/proc/{os.getpid()}/status").read().split("VmRSS:")[1].split()[0]) // 1024


def publish() -> None:
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, 1_000_000)
    pub.bind(f"tcp://127.0.0.1:{PORT}")
    time.sleep(1.0)
    n = 1 << 18  # blocks of 16 tokens: 4M token ids
    payload = vllm.encode([vllm.stored(list(range(1, n + 1)), [7] * (16 * n), block_size=16)])
    print("payload MiB", len(payload) >> 20, flush=True)
    end = time.time() + float(sys.argv[2])
    seq = 0
    while time.time() < end:
        pub.send_multipart([b"", seq.to_bytes(8, "big"), payload])
        seq += 1
    print("sent", seq, flush=True)
    time.sleep(30)


async def subscribe() -> None:
    from kinference.kvcache.pool import PoolCaches
    from kinference.kvevents.subscriber import EventSubscriber, Feed
    from kinference.kvevents.trust import WorkerTrust

    pool = PoolCaches("p", 16)
    trust = pool.trust[0] = WorkerTrust(5.0, 10.0)
    outs = []
    sub = EventSubscriber(time.monotonic, on_message=lambda p, o: outs.append(o))
    feed = Feed(pool, 0, "e0", f"tcp://127.0.0.1:{PORT}", None, b"", trust)
    sub.add(feed)
    p = subprocess.Popen([sys.executable, __file__, "pub", sys.argv[1]])
    lags = []

    async def sampler():
        while True:
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - t - 0.001)

    samp = asyncio.get_running_loop().create_task(sampler())
    for i in range(int(sys.argv[1]) + 6):
        t = time.perf_counter()
        await asyncio.sleep(1.0)
        import collections

        c = dict(collections.Counter(outs))
        print(
            f"t={i + 1}s RSS {rss()} MiB applied {feed.batches} distrust {trust.distrust} next {trust.next_seq} msgs {c}",
            flush=True,
        )
    p.kill()
    samp.cancel()
    await sub.aclose()
    lags.sort()
    print(
        "lag ms: max %.1f p99 %.1f over10 %d of %d"
        % (
            1000 * lags[-1],
            1000 * lags[int(len(lags) * 0.99)],
            sum(l > 0.010 for l in lags),
            len(lags),
        )
    )


if sys.argv[1] == "pub":
    publish()
else:
    asyncio.run(subscribe())
