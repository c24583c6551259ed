"""The bounds of a Pick's tokenization (`prepare`): which prompts are tokenized at all, how
much of one before its decision and where (on the loop, on the tokenizer thread), and how
much background work may be held for the rest. Figures measured on this project's machines
(docs/benchmarks.md)."""

from __future__ import annotations

DEFAULT_TIMEOUT_S = 2.0
WARM_S = 30.0  # startup waits this long at most for the tokenizers' warm-up
# Bodies above this are not tokenized (routed approximately, DEGRADED): 1 MiB takes ~1 s.
MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_QUEUED = 64  # prompts waiting for the tokenizer thread; more are not tokenized
# New text tokenized per Pick at most (~0.1 s); the rest is tokenized after the Pick...
FOREGROUND_CHARS = 128 * 1024
# ... and steps (of `FOREGROUND_STEP_PIECES`, ~1 ms) begun within FOREGROUND_S of the Pick's
# start, its wait for the thread included; one reaching the thread later walks no further
# unless its rest is short (`LATE_CHARS`: a next turn's new text). `PromptBlocks.bounded`.
FOREGROUND_S, FOREGROUND_STEP_PIECES, LATE_CHARS = 0.003, 4, 2 * 1024
# A Pick's first steps run on the loop when the tokenizer thread is idle (no ~1 ms hand-off):
# bodies up to INLINE_BODY_BYTES, INLINE_CHARS new (~1-2 ms), steps begun within INLINE_S.
INLINE_BODY_BYTES = 256 * 1024
INLINE_MESSAGES = 256  # and messages (a render is a Python loop per message: ~0.3-1 ms)
INLINE_CHARS = 2 * 1024
INLINE_S = 0.002
LATER_SLICE_CHARS = 2048  # new text per slice of background work (~1 ms; `here` waits for one)
MAX_LATER_CHARS = 32 * 1024 * 1024  # text held by unfinished background work, at most
