"""h204 scratch: a step's old and new form paired on the same state at every call of the
Dynamo replay (`loadtest.precise_dynamo`), alternating which runs first (the first of a pair
is cold); thread CPU per call, and calls whose answers differ (must be 0).

    python docs/h204/paired.py find [BASE]    # TurnMarks.find: BASE's (/tmp/h204/a) vs this tree's
    python docs/h204/paired.py encode         # a short piece: held-GIL encode vs the batch call
"""

import asyncio
import importlib.util
import statistics
import sys
import time

import numpy as np

from kinference.tokenize import tokenizer as tk
from kinference.tokenize import turns
from loadtest import precise_dynamo as pd

times: dict[str, list[float]] = {"old": [], "new": []}
calls, differ = [0], [0]


def paired(old, new, same, *args):  # type: ignore[no-untyped-def]
    calls[0] += 1
    order = [("old", old), ("new", new)]
    if calls[0] % 2:
        order.reverse()
    answers = {}
    for name, form in order:
        started = time.thread_time()
        answers[name] = form(*args)
        times[name].append(time.thread_time() - started)
    differ[0] += not same(answers["old"], answers["new"])


if sys.argv[1] == "find":
    base = sys.argv[2] if len(sys.argv) > 2 else "/tmp/h204/a"
    spec = importlib.util.spec_from_file_location(
        "old_turns", f"{base}/kinference/tokenize/turns.py"
    )
    old_turns = sys.modules["old_turns"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old_turns)
    new_find = turns.TurnMarks.find

    def find(self, kind, text, prefix=None, cut_ok=None, beyond=0):  # type: ignore[no-untyped-def]
        def old(*a):  # type: ignore[no-untyped-def]
            return old_turns.TurnMarks.find(
                self, kind, text, old_turns.PrefixDigest(kind, text), *a
            )

        def new(*a):  # type: ignore[no-untyped-def]
            return new_find(self, kind, text, turns.PrefixDigest(kind, text), *a)

        paired(old, new, lambda a, b: a is b, cut_ok, beyond)
        return new_find(self, kind, text, prefix, cut_ok, beyond)

    turns.TurnMarks.find = find
else:
    encoded = tk.PromptTokenizer._encoded

    def held(self, texts, special):  # type: ignore[no-untyped-def]
        encode = self._tokenizer.encode
        return [np.asarray(encode(t, add_special_tokens=special).ids, np.uint32) for t in texts]

    def batch(self, texts, special):  # type: ignore[no-untyped-def]
        found = self._tokenizer.encode_batch_fast(list(texts), add_special_tokens=special)
        return [np.asarray(e.ids, dtype=np.uint32) for e in found]

    def encode(self, texts, special):  # type: ignore[no-untyped-def]
        if sum(map(len, texts)) <= 1536 and not self._hold_gil():  # a Pick's, on the loop
            same = lambda a, b: all(map(np.array_equal, a, b))  # noqa: E731
            paired(held, batch, same, self, texts, special)
        return encoded(self, texts, special)

    tk.PromptTokenizer._encoded = encode
for seed in (1, 2):
    asyncio.run(pd.replay(pd.bodies(seed, 3.0, 90), pd.MODEL_DIR, pd.Clocks()))
for name, seconds in times.items():
    first = [s for i, s in enumerate(seconds) if (i % 2 == 0) == (name == "new")]
    print(
        f"{name}: {len(seconds)} calls, mean {statistics.fmean(seconds) * 1e6:.1f} µs, "
        f"median {statistics.median(seconds) * 1e6:.1f}; run first (cold) mean "
        f"{statistics.fmean(first) * 1e6:.1f}"
    )
print("answers differ:", differ[0])
