"""h176: per-prompt counters in the bench's picker processes, when `H176_TRACE=FILE` is set
and this directory is on PYTHONPATH (docs/benchmarks.md, h176)."""

from __future__ import annotations

import os

if os.environ.get("H176_TRACE"):
    from docs.h176 import trace

    trace.install(os.environ["H176_TRACE"])
