import time, random, statistics, os
from tokenizers import Tokenizer
from loadtest.pick_bodies import prose

tok = Tokenizer.from_file("/tmp/dynamo-model/tokenizer.json")
rng = random.Random(1)
for x in [prose(rng, 1000) for _ in range(50)]:
    tok.encode(x)


def cold(label, f, n):
    ts = []
    for _ in range(40):
        x = prose(rng, n)
        time.sleep(0.005)
        t = time.thread_time()
        f(x)
        ts.append((time.thread_time() - t) * 1e6)
    return statistics.median(ts)


for n in (64, 128, 256, 512, 1024):
    a = cold("encode", lambda x: tok.encode(x, add_special_tokens=False).ids, n)
    b = cold("fast", lambda x: tok.encode_batch_fast([x], add_special_tokens=False)[0].ids, n)
    c = cold("pretok", lambda x: tok.pre_tokenizer.pre_tokenize_str(x), n)
    print(
        f"{n:5d} chars: encode {a:.0f} us, batch_fast {b:.0f} us, pretok {c:.0f} us; tokens {len(tok.encode(prose(rng, n)).ids)}"
    )
