"""Per-Pick counters of the precise path, installed by `docs/h174/hook/sitecustomize.py`.

JSON lines to FILE.<pid>. Each precise `PromptPreparer.prepare` (at push, `early`): `t`
(start, perf_counter s), `ms` (its time), `wait_ms` (submit to the thread's start; -1 if it
ran on the loop), `run_ms` (its work, thread or loop), `inline` (`here` ran it on the loop),
`chars` (rendered text), `resumed` (the mark's position; -1 none), `marks` (kept),
`encoded` (characters tokenized on its path), `later` / `urgent` (queued at its start).
Each background slice: `bg` (ms), `encoded`, `chars`. Each mark dropped: `drop` (its
position). Each server-side Pick (`PickerServicer._picked`): `pick_ms`, `t`, `cpu` (the
loop thread's CPU time at its start). Experiments (not product settings): `H174_LINEAGE=N`
(`turns.MAX_PER_LINEAGE`), `H174_PAUSE=S` (the thread's `max_pause_s`), `H174_NOINLINE=1`
(no `here`: every prompt to the tokenizer thread).
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

Write = Callable[[dict[str, Any]], None]
_local = threading.local()


def install(path: str) -> None:
    out = open(f"{path}.{os.getpid()}", "a", buffering=1)  # noqa: SIM115 (closed at exit)
    atexit.register(out.close)
    lock = threading.Lock()

    def write(record: dict[str, Any]) -> None:
        with lock:
            out.write(json.dumps(record) + "\n")

    _experiments()
    _trace_prepare(write)
    _trace_thread(write)
    _trace_marks(write)
    _trace_pick(write)


def _experiments() -> None:
    from kinference.tokenize import prepare, turns

    if os.environ.get("H174_LINEAGE"):
        turns.MAX_PER_LINEAGE = int(os.environ["H174_LINEAGE"])
    if os.environ.get("H174_PAUSE"):
        pause = float(os.environ["H174_PAUSE"])
        prepare.TokenizerThread = functools.partial(  # type: ignore[misc]
            prepare.TokenizerThread, max_pause_s=pause
        )
    if os.environ.get("H174_NOINLINE"):
        prepare.PromptPreparer._here = lambda self, *args: None  # type: ignore[method-assign]


def _trace_prepare(write: Write) -> None:
    from kinference.tokenize.prepare import PromptPreparer

    original_prepare, original_run = PromptPreparer.prepare, PromptPreparer._run

    async def prepare(self: Any, request: Any, body: Any) -> Any:
        thread = self._thread
        record: dict[str, Any] = {
            "t": time.perf_counter(), "later": len(thread._later),
            "urgent": len(thread._urgent), "wait_ms": -1.0, "run_ms": 0.0, "inline": False,
            "resumed": -2, "encoded": 0, "chars": 0,
        }  # fmt: skip
        _local.submitted = record
        try:
            return await original_prepare(self, request, body)
        finally:
            record["ms"] = (time.perf_counter() - record["t"]) * 1000
            write(record)

    def run(self: Any, *args: Any, inline: bool = False, **kw: Any) -> Any:
        record = getattr(_local, "submitted" if inline else "queued", None)
        started, before = time.perf_counter(), _encoded(self)
        if record is not None:
            record["inline"] |= inline
            if not inline and record["wait_ms"] < 0:
                record["wait_ms"] = (started - record["t"]) * 1000
        _local.record = record
        try:
            return original_run(self, *args, inline=inline, **kw)
        finally:
            _local.record = None
            if record is not None:
                record["encoded"] += _encoded(self) - before
                record["run_ms"] += (time.perf_counter() - started) * 1000

    PromptPreparer.prepare = prepare  # type: ignore[method-assign]
    PromptPreparer._run = run  # type: ignore[method-assign]


def _encoded(preparer: Any) -> int:
    return sum(t.cache.encoded_chars for t in preparer._tokenizers.values())


def _trace_thread(write: Write) -> None:
    from kinference.tokenize.prepare import PromptPreparer
    from kinference.tokenize.worker import TokenizerThread

    original_submit, original_finish = TokenizerThread.submit, PromptPreparer._finish

    def submit(thread: Any, work: Any) -> Any:
        record = getattr(_local, "submitted", None)

        def queued() -> Any:
            _local.queued = record
            try:
                return work()
            finally:
                _local.queued = None

        return original_submit(thread, queued)

    def finish(self: Any, begun: Any, refs: Any, ticket: int) -> None:
        started, before = time.perf_counter(), begun.encoded_chars
        try:
            original_finish(self, begun, refs, ticket)
        finally:
            write({
                "bg": (time.perf_counter() - started) * 1000, "t": started,
                "encoded": begun.encoded_chars - before, "chars": begun.chars,
            })  # fmt: skip

    TokenizerThread.submit = submit  # type: ignore[method-assign]
    PromptPreparer._finish = finish  # type: ignore[method-assign]


def _trace_marks(write: Write) -> None:
    from kinference.tokenize.tokenizer import PromptTokenizer
    from kinference.tokenize.turns import TurnMarks

    original_tokenization, original_drop = PromptTokenizer._tokenization, TurnMarks._drop

    def tokenization(self: Any, text: str, special: bool) -> Any:
        work = original_tokenization(self, text, special)
        record = getattr(_local, "record", None)
        if record is not None:
            record["chars"], record["marks"] = len(text), len(self.marks)
            record["resumed"] = work.position or -1
        return work

    def drop(self: Any, kept: Any) -> None:
        write({"drop": kept.mark.position, "ends": kept.mark.ends, "marks": len(self)})
        original_drop(self, kept)

    PromptTokenizer._tokenization = tokenization  # type: ignore[method-assign]
    TurnMarks._drop = drop  # type: ignore[method-assign]


def _trace_pick(write: Write) -> None:
    from kinference.api.servicer import PickerServicer

    original_picked = PickerServicer._picked

    async def picked(self: Any, call: Any, inline: int) -> Any:
        started, cpu = time.perf_counter(), time.thread_time()
        try:
            return await original_picked(self, call, inline)
        finally:
            write({"pick_ms": (time.perf_counter() - started) * 1000, "t": started, "cpu": cpu})

    PickerServicer._picked = picked  # type: ignore[method-assign]
