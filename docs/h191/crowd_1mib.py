import asyncio, json, logging, sys, time, random
from pathlib import Path

sys.path.insert(0, "/work/wt/h191")
from kinference.bodies import Body
from kinference.requests.parse import parse_request
from kinference.tokenize.prepare import PromptPreparer
from tests.tokenize.files import precise_chat_policy, write_model, WORDS

logging.basicConfig(level=logging.WARNING)
files = write_model(Path("/tmp/h191-model"))
policy = precise_chat_policy(files, 16)
rng = random.Random(1)


def text(n):
    return " ".join(rng.choice(WORDS) for _ in range(n // 5))[:n]


async def main():
    p = PromptPreparer(policy)
    await p.warmed()
    made = []
    for i in range(16):
        raw = json.dumps(
            {
                "model": "m",
                "messages": [
                    {"role": "system", "content": text(1 << 20)},
                    {"role": "user", "content": f"q{i}"},
                ],
            }
        ).encode()
        body = Body(
            [raw[i : i + (1 << 20)] for i in range(0, len(raw), 1 << 20)], reserved=len(raw)
        )
        made.append((parse_request(body), body))
    lags = []

    async def sampler():
        while True:
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - t - 0.001)

    s = asyncio.get_running_loop().create_task(sampler())

    async def one(i):
        req, body = made[i]
        t = time.perf_counter()
        q = await p.prepare(req, body)
        dt = time.perf_counter() - t
        return dt, (
            q.problem
            if q and q.problem
            else ("ok", q.blocks[next(iter(q.blocks))].tokens if q else None)
        )

    for rnd in range(2):
        res = await asyncio.gather(*(one(i) for i in range(16)))
        print(
            "round",
            rnd,
            "max s %.2f" % max(r[0] for r in res),
            sorted(set(str(r[1])[:60] for r in res))[:4],
        )
    s.cancel()
    lags.sort()
    print(
        "loop lag ms max %.1f p99 %.1f n>10ms %d"
        % (1000 * lags[-1], 1000 * lags[int(0.99 * len(lags))], sum(l > 0.01 for l in lags))
    )
    p.close()


asyncio.run(main())
