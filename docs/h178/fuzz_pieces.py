"""Fuzz the whole path: a prompt tokenized in checked pieces (and a next turn resumed at a
mark) must give the ids of one encode of the whole text (h178's review)."""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path

from tokenizers import Tokenizer

from docs.h178.fuzz_sure import ATOMS, build
from kinference.tokenize.template import ChatTemplate
from kinference.tokenize.tokenizer import PromptText, PromptTokenizer
from loadtest.tiny_model import WORDS, write_model
from tests.tokenize.files import zoo

NUMBERS = [" ".join(str(random.Random(i).randint(0, 10**k)) for k in range(1, 9)) for i in range(9)]


def text(rng: random.Random, chars: int) -> str:
    parts: list[str] = []
    n = 0
    while n < chars:
        r = rng.random()
        if r < 0.5:
            part = rng.choice(WORDS) + rng.choice([" ", " ", "\n", "\n ", " \n", ". ", "\n\n "])
        elif r < 0.65:
            part = rng.choice(NUMBERS) + rng.choice([" ", "\n", "\n "])
        elif r < 0.7:
            part = rng.choice([" ", "\n", "\t", "1", "a", "."]) * rng.randint(20, 80)
        else:
            part = rng.choice(ATOMS)
        parts.append(part)
        n += len(part)
    return "".join(parts)


def main(seconds: float, seed: int) -> int:
    directory = Path(tempfile.mkdtemp())
    files = write_model(directory)
    template = ChatTemplate.from_file(str(files[1]))
    found = dict(build())
    found.update({kind: Tokenizer.from_str(t) for kind, t in zoo().items()})
    found["tiny"] = Tokenizer.from_file(str(files[0]))
    rng = random.Random(seed)
    bad = runs = 0
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        for kind, tok in found.items():
            runs += 1
            prompt = PromptTokenizer(Tokenizer.from_str(tok.to_str()), template, 16)
            t = text(rng, rng.choice([300, 2000, 6000]))
            got = prompt.token_ids(PromptText(prompt=t)).tolist()
            want = tok.encode(t, add_special_tokens=True).ids
            if got != want:
                bad += 1
                print("prompt", kind, seed, len(t))
                Path(f"/tmp/h178_bad_{kind}_{bad}.txt").write_text(repr(t))
            messages = [{"role": "system", "content": text(rng, 1500)}]
            for _turn in range(3):
                messages.append({"role": "user", "content": text(rng, rng.choice([50, 700]))})
                got = prompt.token_ids(PromptText(messages=messages)).tolist()
                want = tok.encode(template.render(messages), add_special_tokens=False).ids
                if got != want:
                    bad += 1
                    print("chat", kind, seed, _turn)
                reply = text(rng, rng.choice([5, 200, 900]))
                messages.append({"role": "assistant", "content": rng.choice(["", " "]) + reply})
    print(f"{runs} runs, {bad} wrong")
    return bad


if __name__ == "__main__":
    sys.exit(1 if main(float(sys.argv[1]), int(sys.argv[2])) else 0)
