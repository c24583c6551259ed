"""h171: the readings throttle's idle cadence: 4 endpoints scraped every 0.2 s (± 10 %),
fast answers, nothing changing, for 600 s; readings sent and flushes (scrapes that sent
any) per second. Usage: PYTHONPATH=. python docs/h171/cadence.py REFRESH_S"""

from __future__ import annotations

import random
import sys

from kinference.cluster.readings import ReadingThrottle

IDLE = {"ready": True, "read": True, "waiting": 0}
SECONDS = 600.0


def cadence(refresh_s: float) -> tuple[float, float]:
    rng = random.Random(1)
    now = [0.0]
    throttle = ReadingThrottle(lambda: now[0])
    due = {f"e{i}": rng.uniform(0, 0.2) for i in range(4)}
    sent = flushes = 0
    while (first := min(due.items(), key=lambda item: item[1]))[1] <= SECONDS:
        endpoint, now[0] = first
        out = throttle.scraped(endpoint, IDLE, refresh_s)
        sent, flushes = sent + len(out), flushes + bool(out)
        due[endpoint] = now[0] + 0.2 * (1 + 0.1 * rng.uniform(-1, 1))
    return sent / SECONDS, flushes / SECONDS


if __name__ == "__main__":
    readings, flushes = cadence(float(sys.argv[1]))
    print(f"refresh {sys.argv[1]}: readings/s {readings:.2f}, flushes/s {flushes:.2f}")
