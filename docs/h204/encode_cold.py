"""h204 scratch: a 256-character encode warm, and after other work or a 2 ms sleep (cold caches)."""

import time, random, threading
from tokenizers import Tokenizer
from loadtest.pick_bodies import prose

t = Tokenizer.from_file("/tmp/dynamo-model/tokenizer.json")
t2 = Tokenizer.from_file("/tmp/dynamo-model/tokenizer.json")
rng = random.Random(1)
smalls = [prose(rng, 256) for _ in range(100)]
big = [prose(rng, 2048) for _ in range(24)]


def run(label, between, f=lambda x: t.encode(x, add_special_tokens=False).ids):
    tot = 0
    pt = 0
    for x in smalls:
        between()
        s = time.thread_time()
        p = time.process_time()
        f(x)
        tot += time.thread_time() - s
        pt += time.process_time() - p
    print(
        f"{label:40s} thread {tot / len(smalls) * 1e6:.0f} us  process {pt / len(smalls) * 1e6:.0f} us"
    )


run("warm", lambda: None)
run("after same tok batch_fast 48K", lambda: t.encode_batch_fast(big, add_special_tokens=False))
run("after other tok batch_fast 48K", lambda: t2.encode_batch_fast(big, add_special_tokens=False))
run("after other tok encode 48K", lambda: [t2.encode(b) for b in big])
run("after python work", lambda: sorted(random.random() for _ in range(20000)))
run("after sleep 2ms", lambda: time.sleep(0.002))
run("warm", lambda: None)
run("fast warm", lambda: None, lambda x: t.encode_batch_fast([x], add_special_tokens=False)[0].ids)
run(
    "fast after sleep",
    lambda: time.sleep(0.002),
    lambda x: t.encode_batch_fast([x], add_special_tokens=False)[0].ids,
)
