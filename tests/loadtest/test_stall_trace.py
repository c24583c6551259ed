"""The stall tracer puts a stall on collections by their CPU time, not their span (a span
ends where the loop thread hands the GIL to a thread that waited through the collection)."""

from __future__ import annotations

import gc
import io

from loadtest.stall_trace import Stall, StallTrace


def _traced(span_ms: float, cpu_ms: float) -> str:
    trace = StallTrace(lambda: 0.0, 0.002)
    trace.collections.append((1.0, 1.0 + span_ms / 1000, 0, 5, cpu_ms))
    stall = Stall(asked=0.999, due=1.0, late_ms=20.0, loop_cpu_ms=15.0, process_cpu_ms=15.0)
    out = io.StringIO()
    trace.report([stall], out)
    return out.getvalue()


def test_a_long_span_of_little_cpu_is_not_the_stall_s_cause() -> None:
    text = _traced(span_ms=18.0, cpu_ms=0.4)
    assert "[gc]" not in text
    assert "gen0 0.4ms CPU (18.0 span)/5" in text


def test_collections_whose_cpu_is_half_the_stall_are() -> None:
    assert "[gc]" in _traced(span_ms=18.0, cpu_ms=12.0)


def test_the_hook_notes_a_collection_s_cpu_time() -> None:
    trace = StallTrace(lambda: 0.0, 0.002)
    gc.callbacks.append(trace._collection)
    try:
        gc.collect(0)
    finally:
        gc.callbacks.remove(trace._collection)
    (began, ended, generation, _, cpu_ms) = trace.collections[-1]
    assert generation == 0
    assert ended >= began
    assert cpu_ms >= 0.0
