"""`np.unique` (and `np.isin`, which calls it) imports numpy.ma at its first call: ~6 ms of
CPU idle, 10-12 ms in the 1 MiB x16 Pick bench, on the event loop in the first Pick whose
touch takes numpy's path (docs/benchmarks.md, h180). `ageing` imports it with itself, at
startup, so its numpy paths import nothing while serving."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
import numpy as np
from kinference.kvcache.ageing import WorkerAges, _by_touch

before = set(sys.modules)
list(_by_touch(np.arange(1000, dtype=np.int64) % 7))  # more runs than _MAX_RUNS: np.unique
ages = WorkerAges()
for turn in range(60):  # a chat's turns, each repeating the history: many aliased runs,
    ages.touch(list(range(1, 100 * (turn + 1))))
    for other in range(50):  # between them other prompts' touches: their ids spread out
        ages.touch([10**6 + turn * 100 + other])
print(",".join(sorted(set(sys.modules) - before)))
"""


def test_numpy_paths_import_nothing_while_serving() -> None:
    imported = subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert imported == ""
