"""Fuzz `SureCuts.sure`: every cut it calls sure must pre-tokenize (and tokenize) as its two
halves, on GPT-2's, Llama 3's and Qwen 2's pre-tokenizers (h178's review)."""

from __future__ import annotations

import random
import sys
import time

from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers

from kinference.tokenize.sure import SPLITS, SureCuts

ATOMS = [
    "a", "b", "Z", "word", "is", "s", "t", "ll", "1", "2", "0", "9", "123", "45678",
    " ", " ", " ", "  ", "\n", "\n", "\r\n", "\r", "\t", "\x0b", "\x0c", "\x85", "\u00a0",
    "\u2028", "\u2029", "\u3000", "\u200b", "\x1c", "'", "'s", "'S", "'ll", "'LL", "'d", ".",
    "!", ",", "-", "_", "é", "e\u0301", "\u0301", "日", "ß", "ﬁ", "٣", "\uff13", "²", "½", "Ⅻ",
    "\u0660", "\U0001d7d9", "\U0001f600", "<|im_end|>", "<|im_start|>",
]  # fmt: skip


def build() -> dict[str, Tokenizer]:
    rng = random.Random(1)
    lines = ["".join(rng.choice(ATOMS) for _ in range(60)) for _ in range(400)]
    found: dict[str, Tokenizer] = {}
    for kind in ("gpt2", "llama3", "qwen2", "qwen2-nfkc"):
        tok = Tokenizer(models.BPE())
        if kind == "gpt2":
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        else:
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(SPLITS[kind != "llama3"]), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ])  # fmt: skip
        if kind == "qwen2":
            tok.normalizer = normalizers.NFC()
        if kind == "qwen2-nfkc":
            tok.normalizer = normalizers.NFKC()
        trainer = trainers.BpeTrainer(
            vocab_size=1500, special_tokens=["<|im_start|>", "<|im_end|>"], show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )  # fmt: skip
        tok.train_from_iterator(lines, trainer)
        found[kind] = tok
    return found


def main(seconds: float = 60.0, seed: int = 0) -> int:
    tokenizers = build()
    rng = random.Random(seed)
    bad = 0
    checked = 0
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        window = "".join(rng.choice(ATOMS) for _ in range(rng.randint(3, 30)))
        for kind, tok in tokenizers.items():
            sure = SureCuts.of(tok)
            assert sure is not None, kind
            for at in range(len(window) + 1):
                if not sure.sure(window, at):
                    continue
                checked += 1
                enc = [
                    tok.encode(t, add_special_tokens=False).ids
                    for t in (window, window[:at], window[at:])
                ]
                if enc[0] != enc[1] + enc[2]:
                    bad += 1
                    if bad <= 30:
                        print(kind, repr(window[:at]), "|", repr(window[at:]))
    print(f"checked {checked} sure cuts, {bad} wrong")
    return bad


if __name__ == "__main__":
    sys.exit(1 if main(float(sys.argv[1]) if len(sys.argv) > 1 else 60.0) else 0)
