"""The tests' tokenizer files: the benchmark's tiny model (`loadtest.tiny_model`), and small
tokenizers of the other kinds models ship (Llama 3's split regex, SentencePiece's Metaspace,
a prefix space, BERT's normalizer), trained here on a few words: no model hub."""

from __future__ import annotations

import functools
import random
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from kinference.config import Policy, parse_policy
from loadtest.tiny_model import TEMPLATE, WORDS, write_model

__all__ = ["TEMPLATE", "WORDS", "precise_chat_policy", "write_model", "zoo"]

# Llama 3's (and, but for digits, Qwen 2's) pre-tokenizer regex.
LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_SPECIAL = ["<|begin_of_text|>", "<|im_start|>", "<|im_end|>"]


def _lines() -> list[str]:
    rng = random.Random(0)
    return [
        " ".join(rng.choice(WORDS) for _ in range(12)) + f" {i}, é ü 日本 .\n" for i in range(300)
    ]


def _bpe(pre: pre_tokenizers.PreTokenizer, normalizer: normalizers.Normalizer | None) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    if normalizer is not None:
        tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre
    tokenizer.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=500, special_tokens=["[UNK]", *_SPECIAL], initial_alphabet=alphabet,
        show_progress=False,
    )  # fmt: skip
    tokenizer.train_from_iterator(_lines(), trainer)
    return tokenizer


@functools.cache
def zoo() -> dict[str, str]:
    """Kind -> tokenizer.json text."""
    llama3 = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    metaspace = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    wordpiece = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    wordpiece.normalizer = normalizers.BertNormalizer(lowercase=True)
    wordpiece.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    wordpiece.train_from_iterator(
        _lines(), trainers.WordPieceTrainer(vocab_size=400, special_tokens=["[UNK]", *_SPECIAL])
    )
    return {
        "llama3": _bpe(llama3, None).to_str(),
        "metaspace": _bpe(metaspace, None).to_str(),
        "prefix-space": _bpe(pre_tokenizers.ByteLevel(add_prefix_space=True), None).to_str(),
        "nfkc-strip": _bpe(
            pre_tokenizers.ByteLevel(add_prefix_space=False),
            normalizers.Sequence([normalizers.NFKC(), normalizers.Strip()]),
        ).to_str(),
        "wordpiece": wordpiece.to_str(),
    }


def precise_chat_policy(files: tuple[Path, Path], block_size: int) -> Policy:
    """One pool, `chat`, of model `m` in precise mode on these tokenizer and template files."""
    return parse_policy(f"""
pools:
  - name: chat
    endpoints: ["10.0.0.5:8000"]
    models: ["m"]
    prefix: {{mode: precise, events: "tcp://{{host}}:5557", tokenizer: {files[0]},
             chat_template: {files[1]}, block_size: {block_size}}}
""")
