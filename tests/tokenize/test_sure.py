"""Cuts known good without encoding: each is one the encoding check accepts, so the cuts,
and the tokens, are those of the encoding checks alone."""

from __future__ import annotations

import functools
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers

from kinference.tokenize.pieces import _CANDIDATE, CHECK_CHARS, CutChecks, Cutter
from kinference.tokenize.sure import SPLITS, SureCuts
from kinference.tokenize.template import ChatTemplate
from kinference.tokenize.tokenizer import PromptText, PromptTokenizer
from tests.tokenize.files import TEMPLATE, WORDS, write_model, zoo

_ODD = ["  ", "\n\n", " \n", "  \n", "\r\n", "\t", "\t\n", "!\n", "é", "日本語", "ﬁ", "\u0301"]
_ODD += ["\u00a0", "\u2028", "\x1c", "123456", "'s", "'LL", "<|im_start|>", "<|im_end|>"]
_ODD += ["[UNK]", "<|begin_of_text|>", "12 345 6789", "\n 42 7", "\n word", "\n\n 9"]


@functools.cache
def _tokenizers(directory: str) -> dict[str, Tokenizer]:
    """The zoo, the benchmark's model, Qwen 2's split behind NFC, and a GPT-2 byte-level BPE
    that merges whitespace runs ending in newlines (where GPT-2's newline cuts differ)."""
    rng = random.Random(0)
    lines = [
        "".join(rng.choice(WORDS) + rng.choice([" ", "\n\n", "  \n", ".\n"]) for _ in range(20))
        for _ in range(300)
    ]
    found = {kind: Tokenizer.from_str(text) for kind, text in zoo().items()}
    found["tiny"] = Tokenizer.from_file(str(write_model(Path(directory))[0]))
    runs = Tokenizer(models.BPE())
    runs.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    qwen2 = Tokenizer(models.BPE())
    qwen2.normalizer = normalizers.NFC()
    qwen2.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLITS[1]), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    for tokenizer in (runs, qwen2):
        trainer = trainers.BpeTrainer(
            vocab_size=400, special_tokens=["<|im_start|>", "<|im_end|>"], show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )  # fmt: skip
        tokenizer.train_from_iterator(lines, trainer)
    found["gpt2-runs"], found["qwen2-nfc"] = runs, qwen2
    return found


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Tokenizer]:
    return _tokenizers(str(tmp_path_factory.mktemp("tiny")))


def _text(rng: random.Random, chars: int) -> str:
    parts: list[str] = []
    while sum(map(len, parts)) < chars:
        parts.append(rng.choice(WORDS) if rng.random() < 0.7 else rng.choice(_ODD))
        parts.append(rng.choice([" ", " ", " ", "\n", "", ". ", "\n\n", "  "]))
    return "".join(parts)[:chars]


def test_which_tokenizers_have_sure_cuts(tokenizers: dict[str, Tokenizer]) -> None:
    have = {kind for kind, tokenizer in tokenizers.items() if SureCuts.of(tokenizer)}
    assert have == {"llama3", "tiny", "gpt2-runs", "qwen2-nfc"}
    padded = Tokenizer.from_str(tokenizers["tiny"].to_str())
    padded.enable_padding(length=64)
    assert SureCuts.of(padded) is None
    dropout = Tokenizer.from_str(zoo()["llama3"])
    dropout.model = models.BPE(dropout=0.5)
    assert SureCuts.of(dropout) is None


def test_what_is_not_sure(tokenizers: dict[str, Tokenizer]) -> None:
    gpt2, llama3 = SureCuts.of(tokenizers["gpt2-runs"]), SureCuts.of(tokenizers["llama3"])
    assert gpt2 is not None and llama3 is not None
    at = 5
    assert gpt2.sure("hello world", at) and llama3.sure("hello world", at)
    assert gpt2.sure("fox.\nhello", at) and llama3.sure("fox.\nhello", at)
    assert not gpt2.sure("fox \nhello", at) and llama3.sure("fox \nhello", at)
    assert not gpt2.sure("fox\n\nhello", at) and llama3.sure("fox\n\nhello", at)
    assert not llama3.sure("hello world <|im_end|>", at)  # an added token in the window
    assert not llama3.sure("hell1 world", at) and not llama3.sure("helloé world", 6)
    assert not llama3.sure("hello  world", at) and not llama3.sure("hello", at)
    for sure in (gpt2, llama3):  # digits, and a newline before a space and a word or number
        assert sure.sure("12345 67890", at) and sure.sure("12.\n 1234", 4)
        assert sure.sure("word\n word", at) and sure.sure("   \n word", 4)
        assert not sure.sure("12345  6789", at) and not sure.sure("1234a 6789", at)
        assert not sure.sure("word\n  two", at) and not sure.sure("word\n .23", at)
    qwen2 = SureCuts.of(tokenizers["qwen2-nfc"])
    assert qwen2 is not None and qwen2.sure("hello world", at)
    assert not qwen2.sure("hello world é", at)  # the normalizer may change it


def test_cuts_after_an_added_token(tokenizers: dict[str, Tokenizer]) -> None:
    """The run after the window's last added token decides, if that ends before the cut."""
    llama3 = SureCuts.of(tokenizers["llama3"])
    assert llama3 is not None
    turn = "<|im_end|>\n<|im_start|>assistant\nhello world"
    assert llama3.sure(turn, turn.index("hello"))  # a chat turn's generation prompt's end
    assert llama3.sure(turn, turn.index(" world"))
    # Right after an added token (a message's end): no run is cut, whatever follows.
    assert llama3.sure(turn, len("<|im_end|>\n<|im_start|>"))
    assert llama3.sure(turn, len("<|im_end|>")) and llama3.sure("hello<|im_end|>", 15)
    assert not llama3.sure("<|im_end|", 9) and not llama3.sure("<|im_end|>", 9)  # inside it
    assert not llama3.sure("hello<|im_end|> world", 5)  # the added token after the cut
    assert not llama3.sure("he<|im_end|>llo world", 5)  # across the cut
    stripping = Tokenizer.from_str(tokenizers["llama3"].to_str())
    stripping.add_special_tokens([AddedToken("<|tool|>", lstrip=True)])
    loose = SureCuts.of(stripping)
    assert loose is not None and loose.sure("hello world", 5)
    assert not loose.sure(turn, turn.index("hello"))  # not all matched alike: checked


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**31))
def test_sure_cuts_tokenize_as_their_halves(tokenizers: dict[str, Tokenizer], seed: int) -> None:
    rng = random.Random(seed)
    text = _text(rng, 6000)
    for kind, tokenizer in tokenizers.items():
        sure = SureCuts.of(tokenizer)
        if sure is None:
            continue

        def encode(part: str, tokenizer: Tokenizer = tokenizer) -> list[int]:
            return tokenizer.encode(part, add_special_tokens=False).ids  # type: ignore[no-any-return]

        known = after_added = 0
        for match in _CANDIDATE.finditer(text, CHECK_CHARS):
            cut = match.start() + 1
            window = text[cut - CHECK_CHARS : cut + CHECK_CHARS]
            if sure.sure(window, CHECK_CHARS):
                known += 1
                after_added += "<|" in window
                halves = encode(text[cut - CHECK_CHARS : cut]) + encode(window[CHECK_CHARS:])
                assert encode(window) == halves, (kind, window)
        assert known > 0 and after_added > 0, kind


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**31))
def test_sure_cuts_among_added_tokens(tokenizers: dict[str, Tokenizer], seed: int) -> None:
    """Dense added tokens (some cut in two, some back to back, next to spaces and
    newlines): every cut `sure` answers for tokenizes as its halves."""
    rng = random.Random(seed)
    parts = ["<|im_start|>", "<|im_end|>", "<|im_", "|>", "assistant", "hello", "world"]
    parts += [" ", "\n", "  ", ".\n", "<|begin_of_text|>", "[UNK]", "x", "\n\n"]
    for kind, tokenizer in tokenizers.items():
        sure = SureCuts.of(tokenizer)
        if sure is None:
            continue
        known = 0
        for _ in range(300):
            window = "".join(rng.choice(parts) for _ in range(rng.randint(2, 14)))
            for at in range(1, len(window)):
                if sure.sure(window, at):
                    known += 1
                    whole = tokenizer.encode(window, add_special_tokens=False).ids
                    left = tokenizer.encode(window[:at], add_special_tokens=False).ids
                    right = tokenizer.encode(window[at:], add_special_tokens=False).ids
                    assert whole == left + right, (kind, window, at)
        assert known > 0, kind


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 2**31), st.sampled_from(["llama3", "tiny", "gpt2-runs", "qwen2-nfc"]))
def test_cuts_and_tokens_are_those_of_the_encoding_checks(
    tokenizers: dict[str, Tokenizer], seed: int, kind: str
) -> None:
    rng = random.Random(seed)
    raw = tokenizers[kind]
    template = ChatTemplate(TEMPLATE)
    messages = [
        {"role": role, "content": _text(rng, rng.randint(1, 6000))}
        for role in ("system", "user", "assistant", "user")
    ]
    rendered = template.render(messages)
    tokenizer = PromptTokenizer(Tokenizer.from_str(raw.to_str()), template, 4)
    assert (
        tokenizer.token_ids(PromptText(messages=messages)).tolist()
        == raw.encode(rendered, add_special_tokens=False).ids
    )

    def encode(texts: list[str]) -> list[list[int]]:
        return [raw.encode(text, add_special_tokens=False).ids for text in texts]

    sure = SureCuts.of(raw)
    assert sure is not None
    with_sure = Cutter(rendered, b"plain", CutChecks(encode, sure.sure))  # type: ignore[arg-type]
    encoding = Cutter(rendered, b"plain", CutChecks(encode))  # type: ignore[arg-type]
    assert with_sure.next_pieces(10**6) == encoding.next_pieces(10**6)
