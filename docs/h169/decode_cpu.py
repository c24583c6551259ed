"""h169: thread CPU of one decode of the bench's 1 MiB chat span: msgspec whole, whole plus
the `list[Raw]` scan (a seen lead), and `pieced.decode_array` at several piece sizes.

    PYTHONPATH=<a tree of 814e4ef> python docs/h169/decode_cpu.py
"""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import msgspec

from kinference.requests.scan import JsonScanner
from kinference.tokenize import pieced  # type: ignore[attr-defined]
from loadtest.bench_precise_pick import words


def cpu_ms(work: Callable[[], Any], reps: int = 30) -> str:
    took = []
    for _ in range(reps):
        started = time.thread_time()
        work()
        took.append((time.thread_time() - started) * 1000)
    return f"median {statistics.median(took):.3f} min {min(took):.3f} ms"


def main() -> None:
    rng = random.Random(1)
    messages = [
        {"role": "system", "content": words(rng, 1 << 20)},
        {"role": "user", "content": words(rng, 200)},
    ]
    raw = json.dumps(messages).encode()
    scanner = JsonScanner()
    scanner.feed(b'{"messages":' + raw + b"}")
    strings = [(s.start - 12, s.end - 12) for s in scanner.long_strings]
    print("whole", cpu_ms(lambda: msgspec.json.decode(raw)))
    raws = list[msgspec.Raw]
    print(
        "whole + spans",
        cpu_ms(lambda: (msgspec.json.decode(raw), msgspec.json.decode(raw, type=raws))),
    )
    for piece in (32 << 10, 64 << 10, 128 << 10, 256 << 10):
        pieced.PIECE_BYTES = piece
        print(f"pieced {piece >> 10} KiB", cpu_ms(lambda: pieced.decode_array(raw, strings)))


if __name__ == "__main__":
    main()
