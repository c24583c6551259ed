import asyncio, json, logging, sys, time
from pathlib import Path

sys.path.insert(0, "/work/wt/h191")
from kinference.bodies import Body
from kinference.requests.parse import parse_request
from kinference.tokenize.prepare import PromptPreparer
from tests.tokenize.files import precise_chat_policy, write_model

files = write_model(Path("/tmp/h191-model"))
policy = precise_chat_policy(files, 16)


async def main():
    p = PromptPreparer(policy)
    await p.warmed()
    for n in (100, 1000, 4000, 4096):
        raw = json.dumps(
            {
                "model": "m",
                "messages": [
                    {"role": "user" if i % 2 else "assistant", "content": f"m{i}"} for i in range(n)
                ],
            }
        ).encode()
        body = Body([raw], reserved=len(raw))
        req = parse_request(body)
        await asyncio.sleep(0.2)  # thread idle
        lags = []

        async def sampler():
            while True:
                t = time.perf_counter()
                await asyncio.sleep(0)
                lags.append(time.perf_counter() - t)

        s = asyncio.get_running_loop().create_task(sampler())
        await asyncio.sleep(0.01)
        t0 = time.thread_time()
        q = await p.prepare(req, body)
        await asyncio.sleep(0.05)
        s.cancel()
        print(
            n,
            "msgs",
            len(raw) >> 10,
            "KiB",
            "problem",
            q.problem if q else None,
            "max loop gap ms %.1f" % (1000 * max(lags)),
        )
    p.close()


asyncio.run(main())
