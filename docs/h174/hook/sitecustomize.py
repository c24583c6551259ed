"""Counters per precise Pick in the picker process (docs/benchmarks.md, h174).

On the path only when `H174_TRACE=FILE` is set and this directory is on PYTHONPATH (the
bench's picker processes inherit both): wraps `PromptPreparer` and `TurnMarks` to count,
per Pick, whether its text resumed from a mark (and where), the characters it tokenized on
its path and in the background after, its wait for the thread and its time on it; appends
one JSON line per Pick and one per background slice to FILE.<pid>.
"""

from __future__ import annotations

import os

if os.environ.get("H174_TRACE"):
    from docs.h174 import tracer

    tracer.install(os.environ["H174_TRACE"])
