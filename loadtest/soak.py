"""Soak: a steady request rate against a real `kinference serve`, watched for growth.

    python -m loadtest.soak --minutes 10 [--rate 50] [--no-redis] [--out soak.csv]

Requests arrive open-loop at `--rate` per second (the whole flow: push, Pick, pull, both
reports), with bodies from 1 KiB to 4 MiB and an occasional 32 MiB one. Every `--sample-s`
seconds a row goes to the CSV: the server's RSS (/proc/PID/status), buffered bytes and
bodies held (/metrics), event-loop lag (mean and p99 bound over the interval, from
`kinference_event_loop_lag_seconds`), and the requests done and failed so far. The
summary fits a least-squares line to RSS over the second half of the run (the first half
is warm-up) and checks it is flat, that buffered bytes return to 0 once the load stops,
and that no request failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import uvloop

from kinference.client import PickerClient
from loadtest.faults.harness import Fleet, MiB, kinference_env, wait_for
from loadtest.faults.load import Tally, flow
from loadtest.flows import Body, chat_body
from loadtest.redis_server import RedisServer
from loadtest.soak_stats import LagReading, Sample, Summary, summarize

KiB = 1 << 10
# (bytes, weight): mostly small chat bodies, a tail of large ones (~0.2 MiB mean; at 50
# requests/s a 4 MiB body a second and a 32 MiB one every ~20 s).
BODY_MIX = (
    (1 * KiB, 0.46),
    (16 * KiB, 0.30),
    (256 * KiB, 0.17),
    (1 * MiB, 0.049),
    (4 * MiB, 0.02),
    (32 * MiB, 0.001),
)
MAX_OUTSTANDING = 256  # requests under way; past it an arrival is counted as skipped
DRAIN_S = 60.0  # seconds the requests under way get to finish once arrivals stop


@dataclass
class SoakConfig:
    minutes: float
    rate: float  # requests per second
    sample_s: float  # seconds between samples
    redis: bool
    out: Path
    seed: int = 1


class Soak:
    """The arrival loop, the sampler and the samples of one run."""

    def __init__(self, config: SoakConfig, client: PickerClient) -> None:
        self.config = config
        self.client = client
        self.tally = Tally()
        self.samples: list[Sample] = []
        self.skipped = 0
        self._rng = random.Random(config.seed)
        self._bodies = [(chat_body(size), weight) for size, weight in BODY_MIX]
        self._outstanding: set[asyncio.Task[bool]] = set()

    def _body(self) -> Body:
        bodies, weights = zip(*self._bodies, strict=True)
        return self._rng.choices(bodies, weights)[0]

    async def arrivals(self, seconds: float) -> None:
        """Start one request every 1/rate s (open loop: a slow server does not slow us)."""
        start = time.monotonic()
        sent = 0
        while (now := time.monotonic()) - start < seconds:
            due = int((now - start) * self.config.rate) + 1
            for _ in range(due - sent):
                if len(self._outstanding) >= MAX_OUTSTANDING:
                    self.skipped += 1
                    continue
                task = asyncio.create_task(flow(self.client, self._body(), self.tally))
                self._outstanding.add(task)
                task.add_done_callback(self._outstanding.discard)
            sent = due
            await asyncio.sleep(1 / self.config.rate)  # pacing of arrivals

    async def drain(self) -> None:
        if self._outstanding:
            await asyncio.wait(set(self._outstanding), timeout=DRAIN_S)

    @property
    def outstanding(self) -> int:
        return len(self._outstanding)


async def sample(fleet: Fleet, soak: Soak, start: float, previous: LagReading) -> LagReading:
    replica = fleet.replicas[0]
    scrape = await replica.scrape()
    lag = LagReading.of(scrape)
    soak.samples.append(
        Sample(
            t_s=time.monotonic() - start,
            rss_mib=replica.rss_mib(),
            buffered_bytes=int(scrape.value("kinference_buffered_bytes")),
            bodies_held=int(scrape.value("kinference_bodies_held")),
            lag_mean_ms=lag.mean_ms_since(previous),
            lag_p99_ms=lag.p99_ms_since(previous),
            completed=soak.tally.completed,
            failed=soak.tally.failed,
            outstanding=soak.outstanding,
        )
    )
    return lag


async def sampler(fleet: Fleet, soak: Soak, start: float, stop: asyncio.Event) -> LagReading:
    """Sample every `sample_s` until `stop`; returns the first lag reading (for the summary)."""
    first = previous = LagReading.of(await fleet.replicas[0].scrape())
    while not stop.is_set():
        fleet.replicas[0].server.check_alive()
        with contextlib.suppress(TimeoutError):  # the sampling interval passed
            await asyncio.wait_for(stop.wait(), soak.config.sample_s)
        previous = await sample(fleet, soak, start, previous)
    return first


async def run(config: SoakConfig) -> Summary:
    redis = RedisServer().start() if config.redis else None
    workdir = Path(tempfile.mkdtemp(prefix="kinference-soak-"))
    env = kinference_env(redis_url=redis.url) if redis else {}
    fleet = Fleet(workdir, env)
    try:
        replica = await fleet.start("soak")
        soak = Soak(config, replica.client)
        start, stop = time.monotonic(), asyncio.Event()
        sampling = asyncio.create_task(sampler(fleet, soak, start, stop))
        await soak.arrivals(config.minutes * 60)
        await soak.drain()

        async def empty() -> bool:
            return (await replica.scrape()).value("kinference_buffered_bytes") == 0

        drained_s = await wait_for(empty, 30.0, "buffered bytes back to 0")
        stop.set()
        first_lag = await sampling
        last_lag = LagReading.of(await replica.scrape())
        write_csv(config.out, soak.samples)
        return summarize(
            soak.samples, soak.tally, first_lag, last_lag, skipped=soak.skipped, drained_s=drained_s
        )
    finally:
        await fleet.close()
        if redis is not None:
            redis.stop()


def write_csv(path: Path, samples: list[Sample]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(Sample.header())
        writer.writerows(sample.row() for sample in samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=50.0, help="requests per second")
    parser.add_argument("--sample-s", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--no-redis", action="store_true", help="a standalone replica")
    parser.add_argument("--out", type=Path, default=Path("soak.csv"), help="samples CSV")
    args = parser.parse_args(argv)
    config = SoakConfig(args.minutes, args.rate, args.sample_s, not args.no_redis, args.out)
    summary = uvloop.run(run(config))
    print(summary.text())
    print(f"samples: {config.out}")
    return 0 if summary.passed else 1


if __name__ == "__main__":
    sys.exit(main())
