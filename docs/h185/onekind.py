import asyncio, sys, collections

sys.argv = [sys.argv[0], sys.argv[1], "0"] + sys.argv[2:]
exec(open("docs/h185/crowd.py").read().split("async def main")[0])


async def run(kind, n):
    results = collections.Counter()
    await asyncio.gather(*(client(kind, results) for _ in range(n)))
    print(kind, dict(results))


asyncio.run(run(sys.argv[3], int(sys.argv[4])))
