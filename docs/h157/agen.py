import asyncio, time


async def inner(x):
    try:
        for p in x:
            yield p
    finally:
        pass


async def outer(x, n):
    total = 0
    async for c in inner(x):
        total += len(c)
        yield c
    if total != n:
        raise ValueError


async def consume_gen(body):
    async for c in body:
        pass


async def consume_list(body):
    for c in body:
        pass


async def main():
    data = [b"x" * 1000]
    N = 20000
    for rep in range(3):
        t = time.thread_time_ns()
        for _ in range(N):
            await consume_gen(outer(data, 1000))
        a = (time.thread_time_ns() - t) / N
        t = time.thread_time_ns()
        for _ in range(N):
            if len(data[0]) != 1000:
                raise ValueError
            await consume_list(iter(data))
        b = (time.thread_time_ns() - t) / N
        print(f"gen chain {a / 1000:.2f} us, list {b / 1000:.2f} us")


import uvloop

uvloop.install()
asyncio.run(main())
