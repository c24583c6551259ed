"""pytest plugin: each test's wall, process CPU and reaped children's CPU (setup+call+teardown).

Use: `python -m pytest -p docs.h175.cputime ...` with H175_OUT=path.jsonl; one JSON line per test.
Children's CPU counts only children reaped within the test (servers a module fixture keeps
alive land on the test whose teardown reaps them).
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Generator

import pytest


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None]:
    wall0 = time.perf_counter()
    own0, kids0 = _cpu()
    yield
    own1, kids1 = _cpu()
    row = {
        "id": item.nodeid,
        "wall": round(time.perf_counter() - wall0, 4),
        "cpu": round(own1 - own0, 4),
        "kids": round(kids1 - kids0, 4),
    }
    path = os.environ.get("H175_OUT")
    if path:
        with open(path, "a") as out:
            out.write(json.dumps(row) + "\n")
