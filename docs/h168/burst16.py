"""16 `bytes` of 1 MiB made at once in a fresh interpreter (a burst of 16 joins): wall and
thread CPU ms and page faults, median of 15 rounds. Runs against a copy of 9600ce2 (which
has `fill_ahead`), PYTHONPATH = that copy:

    python docs/h168/burst16.py fresh|warm|ahead

fresh: every round's blocks unmapped first (`release(0)`), as a burst nothing was freed
before; warm: the previous round's blocks kept and reused; ahead: `fill_ahead` of 16 blocks.
"""

from __future__ import annotations

import resource
import statistics
import sys
import time

from kinference import heap
from kinference.native import _blocks

MIB = 1 << 20
BLOCK = MIB + 64 * 1024


def settle(ahead: bool) -> None:
    deadline = time.monotonic() + 10
    while ahead and _blocks.stats()["kept_bytes"] < 16 * BLOCK and time.monotonic() < deadline:
        time.sleep(0.001)
    time.sleep(0.05)


def main(mode: str) -> None:
    heap.fix_mmap_threshold()
    heap.cache_large_blocks()
    if mode == "ahead":
        _blocks.fill_ahead(MIB + 64, 16)  # type: ignore[attr-defined]  # 9600ce2 only
    rounds = []
    for _ in range(15):
        settle(mode == "ahead")
        faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        cpu, wall = time.thread_time(), time.perf_counter()
        held = [b"y" * MIB for _ in range(16)]
        rounds.append(
            (
                (time.perf_counter() - wall) * 1e3,
                (time.thread_time() - cpu) * 1e3,
                resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - faults,
            )
        )
        del held
        if mode == "fresh":
            _blocks.release(0)
    wall_ms, cpu_ms, faulted = (statistics.median(r[i] for r in rounds) for i in range(3))
    print(f"{mode} wall {wall_ms:.2f} cpu {cpu_ms:.2f} faults {faulted:.0f}")


if __name__ == "__main__":
    main(sys.argv[1])
