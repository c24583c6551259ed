"""A small real tokenizer.json and chat template, written for tests and benchmarks (no hub).

A byte-level BPE trained on a few words, like the one Dynamo's mocker runs with, and a
ChatML-style template in a tokenizer_config.json.
"""

from __future__ import annotations

import functools
import json
import random
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

_TEXT = (
    "the quick brown fox jumps over lazy dog system user assistant hello world router cache "
    "prefix token block engine worker request response model latency document context"
)
WORDS = tuple(_TEXT.split(" "))
SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"]
TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@functools.cache
def _trained() -> str:
    rng = random.Random(0)
    lines = [" ".join(rng.choice(WORDS) for _ in range(12)) + f" {i} ." for i in range(400)]
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(lines, trainer)
    return tokenizer.to_str()


def write_model(directory: Path) -> tuple[Path, Path]:
    """(tokenizer.json, tokenizer_config.json) in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = directory / "tokenizer.json"
    tokenizer.write_text(_trained())
    config = directory / "tokenizer_config.json"
    special = {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"}
    config.write_text(json.dumps({"chat_template": TEMPLATE, **special}))
    return tokenizer, config
