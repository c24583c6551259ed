"""h167's collection log: every cyclic-GC collection of a picker process, one line each.

On `PYTHONPATH` (with `H167_GC_LOG=DIR`), Python imports this at start-up in every process
of a benchmark; only the picker's (`loadtest.picker_process`, `kinference serve` or
`kinference gateway`, which hosts it) install the hook. Each collection appends one JSON
line to `DIR/gc.PID.jsonl`: the thread that ran it, its generation, start (perf_counter),
span (ms) and what it collected; with `H167_GC_CENSUS=1` a full (generation 2) collection
also notes how many objects each generation tracks and the 12 commonest types of the
oldest (a `gc.get_objects` walk: tens of ms, so not in A/B runs). Not part of the product.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import sys
import threading
import time
from collections import Counter
from typing import Any

_PICKERS = ("loadtest.picker_process", "serve", "gateway")


class _Log:
    def __init__(self, out: int, census: bool) -> None:
        self.out = out
        self.lines: list[dict[str, Any]] = []
        self.census = census
        self.began = self.cpu = 0.0
        self.seen: dict[str, Any] = {}

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        now, cpu = time.perf_counter(), time.thread_time()
        if phase == "start":
            census = self.census and gc.get_freeze_count() > 0  # serving: its heap frozen
            try:
                self.seen = _census(info["generation"]) if census else {}
            except Exception as error:  # finalising: modules half gone
                self.seen = {"census_error": repr(error)}
            self.began, self.cpu = time.perf_counter(), time.thread_time()
            return
        line: dict[str, Any] = {
            "thread": threading.current_thread().name,
            "gen": info["generation"],
            "at": round(self.began, 6),
            "ms": round((now - self.began) * 1000, 3),
            "cpu_ms": round((cpu - self.cpu) * 1000, 3),
            "collected": info["collected"],
            "frozen": gc.get_freeze_count(),
            **self.seen,
        }
        self.lines.append(line)

    def flush(self) -> None:
        lines, self.lines = self.lines, []
        os.write(self.out, "".join(json.dumps(line) + "\n" for line in lines).encode())


def _census(generation: int) -> dict[str, Any]:
    """What a collection of `generation` traverses: objects, items, types by items, and the
    largest containers with what holds them (two referrers up)."""
    objects = [o for g in range(generation + 1) for o in gc.get_objects(g)]
    kinds: Counter[str] = Counter()
    items: Counter[str] = Counter()
    sized = []
    for o in objects:
        kind = type(o).__qualname__
        kinds[kind] += 1
        if isinstance(o, (list, tuple, dict, set)):
            items[kind] += len(o)
            sized.append((len(o), id(o), o))
    sized.sort(key=lambda x: x[0], reverse=True)
    top = [(kind, kinds[kind], held) for kind, held in items.most_common(6)]
    largest = [(n, kind_of(o), _holders(o, objects)) for n, _, o in sized[:6]]
    total = sum(items.values())
    del objects, sized
    return {"objects": sum(kinds.values()), "items": total, "top": top, "largest": largest}


def kind_of(o: object) -> str:
    return type(o).__qualname__


def _holders(o: object, census: list[object], depth: int = 2) -> list[str]:
    """The types of what refers to `o`, and to those (the census list left out)."""
    found = []
    for holder in gc.get_referrers(o):
        if holder is census or type(holder).__name__ == "frame":
            continue
        found.append(kind_of(holder))
        if depth > 1 and isinstance(holder, dict):
            found.extend(f"^{h}" for h in _holders(holder, census, depth - 1)[:2])
        if len(found) >= 4:
            break
    return found


def _install() -> None:
    where = os.environ.get("H167_GC_LOG")
    argv = sys.orig_argv
    if not where or not any(a in _PICKERS for a in argv):
        return
    if "kinference" not in argv and "loadtest.picker_process" not in argv:
        return
    out = os.open(f"{where}/gc.{os.getpid()}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    log = _Log(out, os.environ.get("H167_GC_CENSUS") == "1")
    gc.callbacks.append(log)
    atexit.register(log.flush)


_install()
