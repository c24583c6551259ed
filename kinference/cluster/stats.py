"""Latency statistics merged across replicas, per minute, for dashboards and new replicas.

Every replica folds every other replica's reports into its estimates live (through the
stream). These hashes add what the stream cannot: history. Each replica writes its own
cumulative counts for the current minute (one HSET a second, overwriting its own fields),
so the counts of all replicas add up without coordination; ITL stays in layout-1 bucket
counts, which compose, never in percentiles, which do not.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from kinference.cluster import codec
from kinference.cluster.connection import RedisClient, wrong_type
from kinference.cluster.keys import STATS_TTL_S, Keys
from kinference.itl_layout import BUCKETS as ITL_BUCKETS
from kinference.routing.rates import busy_sample
from kinference.routing.router import Router
from kinference.routing.textsize import MIN_SAMPLES

log = logging.getLogger(__name__)

SEED_MINUTES = 5  # a new replica seeds its latency estimates from this many recent minutes
# A statistic's magnitude past this is none of ours (a sum of them stays finite and exact).
MAX_STAT = float(2**53)
NAN = float("nan")  # a sum missing beside its count (none of ours): no sample (`samples`)


class StatsBuffer:
    """This instance's counts for the current minute, written once a second."""

    def __init__(
        self, redis: RedisClient, keys: Keys, instance: str, wall: Callable[[], float] = time.time
    ) -> None:
        self._redis = redis
        self._keys = keys
        self._instance = instance
        self._wall = wall
        self._minute = int(wall() // 60)
        self._counts: dict[str, float] = {}
        self._dirty = False
        # Past minutes whose last counts are not written yet (Redis away at the turn of the
        # minute, or the turn came between two writes): they were dropped at the turn.
        self._unwritten: dict[int, dict[str, float]] = {}
        self._junk: set[int] = set()  # minutes whose key is of another type: not written

    def fold(self, events: list[list[Any]]) -> None:
        """Count the reports among a flushed batch of this instance's events."""
        minute = int(self._wall() // 60)
        for event in events:
            if event[0] == codec.FIRST_TOKEN:
                self._roll(minute)
                base = f"{self._instance}|{event[1]}|{event[2]}|"
                self._bump(base + "ttft_ms_sum", float(event[3]))
                self._bump(base + "ttft_count", 1)
            elif event[0] == codec.SERVED:
                self._roll(minute)
                self._served(f"{self._instance}|{event[1]}|{event[2]}|", event)
            elif event[0] == codec.TEXT_SIZE:
                self._roll(minute)
                base = f"{self._instance}|{event[1]}|{event[2]}|text_"
                self._bump(base + "chars_sum", float(event[3]))
                self._bump(base + "tokens_sum", float(event[4]))
                self._bump(base + "count", 1)
            elif event[0] == codec.BUSY:
                self._roll(minute)
                self._busy(f"{self._instance}|{event[1]}|{event[2]}|busy_", event)
            elif event[0] == codec.ITL:
                self._roll(minute)
                base = f"{self._instance}|{event[1]}|{event[2]}|itl_b"
                for bucket, count in enumerate(event[3]):
                    if count:
                        self._bump(f"{base}{bucket}", count)

    def _served(self, base: str, event: list[Any]) -> None:
        """The TTFT model's samples: prefill (uncached tokens and ms) and service ms."""
        _, _, _, uncached, prefill_ms, service_ms = event
        if prefill_ms is not None:
            self._bump(base + "prefill_count", 1)
            self._bump(base + "prefill_tokens_sum", float(uncached))
            self._bump(base + "prefill_ms_sum", float(prefill_ms))
        if service_ms is not None:
            self._bump(base + "service_count", 1)
            self._bump(base + "service_ms_sum", float(service_ms))

    def _busy(self, base: str, event: list[Any]) -> None:
        """A busy sample as the fit takes it, in sums that compose across replicas:
        count, sequences squared and sequences x excess ms (a fit through the origin)."""
        sample = busy_sample(float(event[3]), float(event[4]))
        if sample is not None:
            sequences, excess = sample
            self._bump(base + "count", 1)
            self._bump(base + "sequences_sq_sum", sequences * sequences)
            self._bump(base + "product_sum", sequences * excess)

    def _bump(self, field: str, value: float) -> None:
        self._counts[field] = self._counts.get(field, 0) + value
        self._dirty = True

    def _roll(self, minute: int) -> None:
        if minute != self._minute:  # a new minute starts from zero, the old one kept to write
            if self._dirty:
                self._unwritten[self._minute] = self._counts
            self._minute, self._counts, self._dirty = minute, {}, False

    async def flush(self) -> None:
        """Write this minute's counts, and past minutes' not written yet (raises on a Redis
        error; they are written at the next call). A minute whose key is of another type
        (WRONGTYPE: set by hand, or by a tool sharing the prefix) is given up: failing on
        it, every write would fail for the hour past minutes are kept to write."""
        oldest = int(self._wall() // 60) - STATS_TTL_S // 60
        self._junk = {m for m in self._junk if m > oldest}
        writes = {m: c for m, c in self._unwritten.items() if m > oldest and m not in self._junk}
        self._unwritten = {}
        if self._dirty and self._minute not in self._junk:
            writes[self._minute] = dict(self._counts)
        if not writes:
            return
        self._dirty = False  # bumps during the write set it again
        pipe = self._redis.pipeline(transaction=False)
        for minute, counts in writes.items():
            pipe.hset(self._keys.stats(minute), mapping=counts)
            pipe.expire(self._keys.stats(minute), STATS_TTL_S)
        try:
            replies = await pipe.execute(raise_on_error=False)
        except BaseException:
            self._keep(writes)
            raise
        for minute, reply in zip(writes, replies[::2], strict=True):
            if isinstance(reply, Exception) and wrong_type(reply):
                self._junk.add(minute)
                log.warning("%s is not a hash: this replica's counts of that minute are not "
                            "shared", self._keys.stats(minute))  # fmt: skip
        errors = [r for r in replies if isinstance(r, Exception) and not wrong_type(r)]
        if errors:
            self._keep({m: c for m, c in writes.items() if m not in self._junk})
            raise errors[0]

    def _keep(self, writes: dict[int, dict[str, float]]) -> None:
        """Minutes whose write failed, to write at the next flush."""
        for minute, counts in writes.items():
            if minute == self._minute:
                self._dirty = True
            else:
                self._unwritten.setdefault(minute, counts)


async def read_stats(redis: RedisClient, keys: Keys, now: float, minutes: int) -> dict[str, float]:
    """`endpoint|model|field` -> count summed over every instance and the last `minutes`
    (fields none of ours writes skipped: `_stat`; a key of another type holds none)."""
    current = int(now // 60)
    pipe = redis.pipeline(transaction=False)
    for minute in range(current - minutes + 1, current + 1):
        pipe.hgetall(keys.stats(minute))
    totals: dict[str, float] = {}
    for answer in await pipe.execute(raise_on_error=False):
        if isinstance(answer, Exception):
            if wrong_type(answer):
                continue
            raise answer
        for field, value in answer.items():
            stat = _stat(field, value)
            if stat is not None:
                totals[stat[0]] = totals.get(stat[0], 0.0) + stat[1]
    return totals


def _stat(field: bytes, value: bytes) -> tuple[str, float] | None:
    """One field as (`endpoint|model|field`, its number); None for one that no replica
    writes (an operator's, a foreign tool's: not `instance|endpoint|model|field` in UTF-8,
    or not a number within MAX_STAT), which would fail every replica's bootstrap."""
    try:
        name, number = field.decode().partition("|")[2], float(value)
    except ValueError:  # UnicodeDecodeError too
        return None
    if name.count("|") < 2 or not abs(number) <= MAX_STAT:  # (NaN too)
        return None
    return name, number


async def seed_estimates(redis: RedisClient, keys: Keys, router: Router, now: float) -> None:
    """Start a new replica's TTFT and ITL estimates and the TTFT model's rates from the
    cluster's recent minutes (means: the live stream refines them from there)."""
    totals = await read_stats(redis, keys, now, SEED_MINUTES)
    itl: dict[tuple[str, str], np.ndarray[Any, Any]] = {}
    busy: dict[str, tuple[str, float, float, float]] = {}  # model -> endpoint and sums
    for name, value in totals.items():
        endpoint, model, field = name.rsplit("|", 2)
        if field == "ttft_count" and value > 0:
            mean = totals.get(f"{endpoint}|{model}|ttft_ms_sum", NAN) / value
            router.remote_first_token(endpoint, model, mean)
        elif field.startswith("itl_b") and field[5:].isdecimal() and int(field[5:]) < ITL_BUCKETS:
            counts = itl.setdefault((endpoint, model), np.zeros(ITL_BUCKETS))
            counts[int(field[5:])] += value
        elif field in ("prefill_count", "service_count") and value > 0:
            _seed_rate(router, totals, f"{endpoint}|{model}|{field}", value)
        elif field == "text_count" and value > 0:
            _seed_text(router, totals, endpoint, model, value)
        elif field == "busy_count" and value > 0:
            _, count, squares, products = busy.get(model, (endpoint, 0.0, 0.0, 0.0))
            base = f"{endpoint}|{model}|busy_"
            busy[model] = (endpoint, count + value,
                           squares + totals.get(base + "sequences_sq_sum", 0.0),
                           products + totals.get(base + "product_sum", NAN))  # fmt: skip
    for (endpoint, model), counts in itl.items():
        router.remote_itl(endpoint, model, tuple(int(c) for c in counts))
    for model, (endpoint, count, squares, products) in busy.items():
        _seed_busy(router, endpoint, model, squares / count, products / count)


def _seed_busy(router: Router, endpoint: str, model: str, squares: float, products: float) -> None:
    """The model's busy cost: one sample with the cluster's mean sums (sequences squared,
    sequences x excess), so the fit through the origin starts at their ratio."""
    if squares > 0.0:
        sequences = squares**0.5
        router.remote_busy(endpoint, model, sequences, products / sequences)


def _seed_text(
    router: Router, totals: dict[str, float], endpoint: str, model: str, count: float
) -> None:
    """Characters per token: the cluster's mean sample, counted as up to `MIN_SAMPLES`
    samples (enough to replace the prior; the live stream's samples refine it)."""
    base = f"{endpoint}|{model}|text_"
    chars = totals.get(base + "chars_sum", NAN) / count
    tokens = totals.get(base + "tokens_sum", NAN) / count
    for _ in range(min(int(count), MIN_SAMPLES)):
        router.remote_text(endpoint, model, chars, tokens)


def _seed_rate(router: Router, totals: dict[str, float], name: str, count: float) -> None:
    """Fold the mean prefill or service sample of `name` (`endpoint|model|*_count`)."""
    endpoint, model, field = name.rsplit("|", 2)
    base = f"{endpoint}|{model}|"
    if field == "prefill_count":
        tokens = totals.get(base + "prefill_tokens_sum", NAN) / count
        prefill = totals.get(base + "prefill_ms_sum", NAN) / count
        router.remote_served(endpoint, model, tokens, prefill, NAN)
    else:
        router.remote_served(
            endpoint, model, 0.0, NAN, totals.get(base + "service_ms_sum", NAN) / count
        )
