"""h176's counters: where a precise prompt's time goes, per prompt (JSON lines to FILE.<pid>).

`p` records (one per `PromptPreparer.prepare`): `t0` start (perf_counter, s), `ms` its time,
`here_ms` its share run on the loop (`TokenizerThread.here`; 0: none), `wait_ms` from its
start to the thread taking it (-1: never went there), `thread_ms` its time on the thread,
`chars` the rendered text, `resumed` where its tokenization started (the mark's position;
0: the text's start), `pos` where its walk stopped, `walked` characters passed on its path
(found in the cache or not), `encoded` characters tokenized (not in the cache), `late` it
reached the thread past its foreground deadline (took the furthest mark only), `caught` the
position a catch-up resumed at (-1 none), `blocks` blocks named, `exact`.
`b` records (one per background slice): `t0`, `ms`, `pos0` / `pos`, `encoded`, `chars`.
`k` records (Picks, server side): `t0`, `ms`.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

_local = threading.local()


def install(path: str) -> None:
    """One JSON line per record, each one `write` call on a line-buffered file (the picker
    may end without running `atexit`)."""
    out = open(f"{path}.{os.getpid()}", "a", buffering=1)  # noqa: SIM115 (open until exit)
    guard = threading.Lock()

    def write(record: dict[str, Any]) -> None:
        line = json.dumps(record) + "\n"
        with guard:
            out.write(line)

    _prepare(write)
    _pick(write)
    _events(write)


def _prepare(write: Any) -> None:
    from kinference.tokenize import lazy, prepare, tokenizer

    preparer = prepare.PromptPreparer
    prepare_0, run_0, finish_0 = preparer.prepare, preparer._run, preparer._finish
    tokenization_0 = tokenizer.PromptTokenizer._tokenization
    catch_up_0, only_0 = lazy.Tokenization.catch_up, lazy.Tokenization.catch_up_only

    async def traced_prepare(self: Any, request: Any, body: Any) -> Any:
        record: dict[str, Any] = {
            "p": 1, "t0": time.perf_counter(), "here_ms": 0.0, "wait_ms": -1.0,
            "thread_ms": 0.0, "chars": 0, "resumed": -1, "pos": -1, "walked": 0,
            "encoded": 0, "late": False, "caught": -1,
        }  # fmt: skip
        _local.record = record
        try:
            result = await prepare_0(self, request, body)
        finally:
            _local.record = None
            record["ms"] = (time.perf_counter() - record["t0"]) * 1000
        blocks = next(iter(result.blocks.values()), None) if result is not None else None
        if blocks is not None:
            record["blocks"], record["exact"] = len(blocks.blocks), blocks.exact
        write(record)
        return result

    def traced_run(self: Any, plan: Any, pools: Any, request: Any, body: Any,
                   begun: Any, **kw: Any) -> Any:  # fmt: skip
        inline = kw.get("inline", False)
        record = _local.record if inline else getattr(_local, "queued", None)
        started = time.perf_counter()
        if record is not None and not inline:
            record["wait_ms"] = (started - record["t0"]) * 1000
        _local.current = record
        try:
            result = run_0(self, plan, pools, request, body, begun, **kw)
        finally:
            _local.current = None
        if record is not None:
            spent = (time.perf_counter() - started) * 1000
            record["here_ms" if inline else "thread_ms"] += spent
            work = _work(result, begun)
            if work is not None:
                record["pos"], record["encoded"] = work.position, work.encoded_chars
                record["walked"] = work.position - max(record["resumed"], 0)
                record["deferred"] = getattr(work, "deferred", False)
        return result

    def _work(result: Any, begun: Any) -> Any:
        from kinference.tokenize.begun import Started

        holder = result if isinstance(result, Started) else begun
        if holder is None:
            holder = getattr(_local, "started", None)
        if holder is None:
            return None
        work = next(iter(holder.work.values()), None)
        return work if isinstance(work, lazy.Tokenization) else None

    start_0 = preparer._start

    def traced_start(self: Any, plan: Any, pools: Any, text: Any) -> Any:
        begun = start_0(self, plan, pools, text)
        _local.started = begun
        return begun

    def traced_tokenization(self: Any, text: str, special: bool) -> Any:
        work = tokenization_0(self, text, special)
        record = getattr(_local, "current", None)
        if record is not None:
            record["chars"], record["resumed"] = len(text), work.position
        return work

    def traced_only(self: Any, known: Any) -> None:
        record = getattr(_local, "current", None)
        if record is not None:
            record["late"] = True
        only_0(self, known)

    def traced_catch_up(self: Any) -> bool:
        before = self.position
        found = catch_up_0(self)
        record = getattr(_local, "current", None)
        if record is not None and found:
            record["caught"] = self.position
            record["caught_from"] = before
        return found

    def traced_finish(self: Any, begun: Any, refs: Any, ticket: int) -> None:
        started, pos0, enc0 = time.perf_counter(), begun.position, begun.encoded_chars
        try:
            finish_0(self, begun, refs, ticket)
        finally:
            write({
                "b": 1, "t0": started, "ms": (time.perf_counter() - started) * 1000,
                "pos0": pos0, "pos": begun.position, "encoded": begun.encoded_chars - enc0,
                "chars": begun.chars,
            })  # fmt: skip

    from kinference.tokenize.worker import TokenizerThread

    submit_0 = TokenizerThread.submit

    def traced_submit(thread: Any, work: Any) -> Any:
        record = getattr(_local, "record", None)

        def queued() -> Any:
            _local.queued = record
            _local.started = None
            try:
                return work()
            finally:
                _local.queued = None

        return submit_0(thread, queued)

    def traced_here(self: Any, *args: Any) -> Any:
        _local.started = None
        return here_0(self, *args)

    from kinference.tokenize.turns import TurnMarks

    find_0 = TurnMarks.find

    def traced_find(marks: Any, kind: Any, text: Any, prefix: Any = None, cut_ok: Any = None,
                    beyond: int = 0) -> Any:  # fmt: skip
        found = find_0(marks, kind, text, prefix, cut_ok, beyond)
        record = getattr(_local, "current", None)
        if record is not None:
            lineage = marks._lineages.get(prefix.lead) if prefix is not None else None
            ends = sorted(k.mark.position for k in lineage.values()) if lineage else []
            record.setdefault("finds", []).append(
                [beyond, found.position if found else -1, len(ends), ends[-3:]]
            )
        return found

    TurnMarks.find = traced_find  # type: ignore[method-assign]
    here_0 = preparer._here
    preparer.prepare = traced_prepare  # type: ignore[method-assign]
    preparer._run = traced_run  # type: ignore[method-assign]
    preparer._start = traced_start  # type: ignore[method-assign]
    preparer._here = traced_here  # type: ignore[method-assign]
    preparer._finish = traced_finish  # type: ignore[method-assign]
    tokenizer.PromptTokenizer._tokenization = traced_tokenization  # type: ignore[method-assign]
    lazy.Tokenization.catch_up = traced_catch_up  # type: ignore[method-assign]
    lazy.Tokenization.catch_up_only = traced_only  # type: ignore[method-assign]
    TokenizerThread.submit = traced_submit  # type: ignore[method-assign]


def _pick(write: Any) -> None:
    from kinference.api.servicer import PickerServicer

    picked_0 = PickerServicer._picked

    async def picked(self: Any, call: Any, inline: int) -> Any:
        started = time.perf_counter()
        try:
            return await picked_0(self, call, inline)
        finally:
            write({"k": 1, "t0": started, "ms": (time.perf_counter() - started) * 1000})

    PickerServicer._picked = picked  # type: ignore[method-assign]


def _events(write: Any) -> None:
    """`e` records: each step of a KV-event batch applied on the loop (`t0`, `ms`)."""
    from kinference.kvevents.subscriber import EventSubscriber as Subscriber

    steps_0 = Subscriber.steps

    def steps(self: Any, feed: Any, parts: Any, caught_up: bool) -> Any:
        inner = steps_0(self, feed, parts, caught_up)
        while True:
            started = time.perf_counter()
            try:
                item = next(inner)
            except StopIteration as stop:
                write({"e": 1, "t0": started, "ms": (time.perf_counter() - started) * 1000})
                return stop.value
            write({"e": 1, "t0": started, "ms": (time.perf_counter() - started) * 1000})
            yield item

    Subscriber.steps = steps  # type: ignore[method-assign]
