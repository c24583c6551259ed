"""h171: interleaved tokenizations of conversations sharing a system prompt, on one
`TurnMarks`: random known-stops, budgets, stops without marks, late `leave_marks`,
`catch_up`. Each must end at the whole text's ids, token count and blocks.
Usage: PYTHONPATH=. python docs/h171/fuzz.py SEEDS"""

from __future__ import annotations

import random
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from kinference.kvcache.blocks import BlockId, identities
from kinference.tokenize.lazy import Tokenization
from kinference.tokenize.template import ChatTemplate
from kinference.tokenize.tokenizer import PromptText, PromptTokenizer
from tests.tokenize.files import WORDS, write_model

BS = 16
FILES = write_model(Path(tempfile.mkdtemp()))
HF = Tokenizer.from_file(str(FILES[0]))
TEMPLATE = ChatTemplate.from_file(str(FILES[1]))


def words(rng: random.Random, chars: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(chars // 5 + 1))[:chars]


def message(rng: random.Random, role: str, most: int) -> dict[str, str]:
    return {"role": role, "content": words(rng, rng.randint(5, most))}


def holding(held: int) -> Any:
    def known(blocks: Sequence[BlockId]) -> int:
        return min(len(blocks), held)

    return known


def step(rng: random.Random, live: list[tuple[Tokenization, str]]) -> None:
    work, _ = rng.choice(live)
    roll = rng.random()
    if roll < 0.7:
        work.advance(None, rng.choice([2048, 512, None]))
    elif roll < 0.85:
        work.leave_marks()
    else:
        work.catch_up()


def run(seed: int) -> bool:
    rng = random.Random(seed)
    tokenizer = PromptTokenizer.from_files(str(FILES[0]), str(FILES[1]), BS)
    system = {"role": "system", "content": words(rng, rng.choice([300, 3000, 9000]))}
    talks = [[system, message(rng, "user", 3000)] for _ in range(3)]
    live: list[tuple[Tokenization, str]] = []
    for _ in range(40):
        if live and rng.random() >= 0.35:
            step(rng, live)
            continue
        c = rng.randrange(len(talks))
        messages = talks[c]
        talks[c] = [*messages, message(rng, "assistant", 2000), message(rng, "user", 2000)]
        work = tokenizer.start(PromptText(messages=messages))
        assert isinstance(work, Tokenization)
        budget = rng.choice([None, 2048, 256])
        work.advance(holding(rng.randint(0, 400)), budget, marks=rng.random() < 0.5)
        live.append((work, TEMPLATE.render(messages)))
    for work, text in live:
        work.advance()
        exact = HF.encode(text, add_special_tokens=False).ids
        result = work.result()
        blocks = identities(np.asarray(exact, dtype=np.uint32), BS)
        if work.ids().tolist() != exact or result.tokens != len(exact):
            return False
        if list(result.blocks) != blocks:
            return False
    return True


if __name__ == "__main__":
    seeds = int(sys.argv[1])
    print("bad", sum(not run(seed) for seed in range(seeds)), "of", seeds)
