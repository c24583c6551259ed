"""h184 scratch: `loadtest.bench_precise_mocker` with the probe (`probe.py`) in its process.

    python docs/h184/mocker.py OUT_PREFIX [bench args]

Writes OUT_PREFIX.trace.jsonl (each Pick's candidates and terms, each event batch's removed
blocks, tagged with mode and rate), OUT_PREFIX.req.jsonl (each request's sample, tagged, with
the replay's start on the same clock) and the bench's table on stdout.
"""

import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import probe  # noqa: E402

from loadtest import bench_precise_mocker as B  # noqa: E402
from loadtest.routing_bench import replay as RP  # noqa: E402


def main() -> int:
    prefix, argv = sys.argv[1], sys.argv[2:]
    probe.install(f"{prefix}.trace.jsonl")
    req = open(f"{prefix}.req.jsonl", "a", buffering=1)
    of_run = B.run

    async def run(mode, rate, args):
        probe.TAGS.update(mode=mode, rate=rate)
        return await of_run(mode, rate, args)

    B.run = run
    of_rrun = RP.Replay.run

    async def rrun(self, conversations):
        try:
            return await of_rrun(self, conversations)
        finally:
            for s in self.samples:
                req.write(
                    json.dumps({**probe.TAGS, "start": self._start, **dataclasses.asdict(s)}) + "\n"
                )

    RP.Replay.run = rrun
    return B.main(argv)


if __name__ == "__main__":
    sys.exit(main())
