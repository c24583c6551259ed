import random, time, statistics
from tokenizers import Tokenizer
import numpy as np
from loadtest.pick_bodies import prose
from kinference.tokenize.pieces import Piece
from kinference.tokenize.joined import encode_run

tok = Tokenizer.from_file("/tmp/dynamo-model/tokenizer.json")
rng = random.Random(3)


def sample():
    a = prose(rng, rng.randint(200, 600)) + "<|im_end|>"
    b = (
        "\n<|im_start|>user\n"
        + prose(rng, rng.randint(150, 500))
        + "<|im_end|>\n<|im_start|>assistant\n"
    )
    t = a + b
    return t, [Piece(0, len(a), b""), Piece(len(a), len(t), b"")]


sep, joi = [], []
for i in range(60):
    t, ps = sample()
    for mode in (0, 1) if i % 2 else (1, 0):
        time.sleep(0.005)
        c = time.thread_time()
        if mode == 0:
            r = [
                np.asarray(tok.encode(t[p.start : p.end], add_special_tokens=False).ids, np.uint32)
                for p in ps
            ]
            sep.append((time.thread_time() - c) * 1e6)
        else:
            r2 = encode_run(tok, t, ps)
            joi.append((time.thread_time() - c) * 1e6)
print(
    f"separate median {statistics.median(sep):.0f} us, joined median {statistics.median(joi):.0f} us (n {len(sep)})"
)
