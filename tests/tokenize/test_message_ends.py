"""Chat prompts are cut where a message ends (right after the template's `eos_token`) and
leave an open mark there: a new conversation on the same first messages resumes at their
end, tokenizing only its own text, with the tokens and blocks of a full tokenization
whatever follows (another template's separator, an added token that starts like the end
token, a system prompt ending in half an added token or a word the next text would merge)."""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from kinference.kvcache.blocks import PromptBlocks, identities
from kinference.tokenize.pieces import CHECK_CHARS, CutChecks, Cutter
from kinference.tokenize.template import ChatTemplate
from kinference.tokenize.tokenizer import PromptText, PromptTokenizer
from tests.tokenize.files import TEMPLATE, WORDS, write_model, zoo

END = "<|im_end|>"
_ODD = ["  ", "\n\n", " \n", "\t", "42", "don't", "é", "日本", "<|im_start|>", END, "<|im_"]
_ODD += ["<|im_end|", "|>", "\u0301", "x", "hel", "lo"]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_model(tmp_path_factory.mktemp("model"))


def _text(rng: random.Random, chars: int, least: int = 1) -> str:
    parts: list[str] = []
    while sum(map(len, parts)) < chars:
        parts.append(rng.choice(WORDS) if rng.random() < 0.7 else rng.choice(_ODD))
        parts.append(rng.choice([" ", " ", "\n", "", ". "]))
    return "".join(parts)[: rng.randint(least, chars)]


def _check(tokenizer: PromptTokenizer, raw: Tokenizer, text: str) -> int:
    """Tokenize `text` as a chat prompt; assert the full tokenization's tokens and blocks;
    the characters it encoded."""
    begun = tokenizer._tokenization(text, special=False)
    begun.advance()
    expected = raw.encode(text, add_special_tokens=False).ids
    assert begun.ids().tolist() == expected
    assert begun.result().blocks == tuple(identities(np.asarray(expected, np.uint32), 4))
    return begun.encoded_chars


def test_new_conversations_resume_at_the_system_prompts_end(files: tuple[Path, Path]) -> None:
    rng = random.Random(3)
    tokenizer = PromptTokenizer.from_files(str(files[0]), str(files[1]), 4)
    raw = Tokenizer.from_file(str(files[0]))
    template = ChatTemplate.from_file(str(files[1]))
    system = {"role": "system", "content": " ".join(rng.choice(WORDS) for _ in range(3000))}
    shared = template.render([system]).removesuffix("<|im_start|>assistant\n")
    for conversation in range(4):
        user = {"role": "user", "content": " ".join(rng.choice(WORDS) for _ in range(40))}
        rendered = template.render([system, user])
        begun = tokenizer.start(PromptText(messages=[system, user]))
        assert not isinstance(begun, PromptBlocks)
        if conversation:  # resumed right after the system message's END
            assert begun._cutter.position == len(shared) - 1
            assert tokenizer.marks.resumed == conversation
        begun.advance()
        expected = raw.encode(rendered, add_special_tokens=False).ids
        assert begun.ids().tolist() == expected
        if conversation:  # its own text and the check of the cut, nothing of the system's
            assert begun.encoded_chars <= len(rendered) - len(shared) + 4 * CHECK_CHARS


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**31), st.sampled_from(["tiny", *sorted(zoo())]))
def test_texts_going_on_past_a_message_end_tokenize_as_the_whole_text(
    files: tuple[Path, Path], seed: int, kind: str
) -> None:
    """Texts sharing everything up to a message's end, then anything (another template's
    separator, `<|im_end|>!` read as one added token, hostile words), and later turns."""
    rng = random.Random(seed)
    source = Path(files[0]).read_text() if kind == "tiny" else zoo()[kind]
    raw = Tokenizer.from_str(source)
    if rng.random() < 0.5:  # an added token the end token is the start of
        raw.add_special_tokens([END + "!"])
    tokenizer = PromptTokenizer(
        Tokenizer.from_str(raw.to_str()), ChatTemplate(TEMPLATE, {"eos_token": END}), 4
    )
    shared = "<|im_start|>system\n" + _text(rng, 4000, 100) + END
    for _ in range(6):
        after = rng.choice(["\n<|im_start|>user\n", "<|im_start|>user\n", "!", " ", "x", ""])
        text = shared + after + _text(rng, 400)
        for _ in range(3):  # its next turns
            _check(tokenizer, raw, text)
            text += END + "\n<|im_start|>assistant\n" + _text(rng, 300)


def test_a_text_past_a_message_end_resumes_only_where_the_cut_is_good(
    files: tuple[Path, Path],
) -> None:
    """`<|im_end|>!` an added token too: a text going on with `!` reads it across the
    mark's cut, so it does not resume there; a text going on with a newline does."""
    raw = Tokenizer.from_file(str(files[0]))
    raw.add_special_tokens([END + "!"])
    tokenizer = PromptTokenizer(
        Tokenizer.from_str(raw.to_str()), ChatTemplate(TEMPLATE, {"eos_token": END}), 4
    )
    rng = random.Random(5)
    shared = "<|im_start|>system\n" + " ".join(rng.choice(WORDS) for _ in range(800)) + END
    user = "\n<|im_start|>user\n" + " ".join(rng.choice(WORDS) for _ in range(30))
    _check(tokenizer, raw, shared + user)
    before = tokenizer.marks.resumed
    encoded = _check(tokenizer, raw, shared + "!" + user)
    assert tokenizer.marks.resumed == before + 1  # at an earlier mark, not the open one
    assert encoded > len(user) + 4 * CHECK_CHARS
    other = "\n<|im_start|>user\n" + " ".join(rng.choice(WORDS) for _ in range(30))
    encoded = _check(tokenizer, raw, shared + other)
    assert encoded <= len(other) + 4 * CHECK_CHARS


def test_no_message_end_cuts_without_an_added_end_token(files: tuple[Path, Path]) -> None:
    """An `eos_token` the tokenizer does not hold as an added token (then the template's
    text is ordinary text), and completion prompts: cut as before, same tokens."""
    raw = Tokenizer.from_file(str(files[0]))
    plain_end = TEMPLATE.replace(END, "</s>")
    tokenizer = PromptTokenizer(raw, ChatTemplate(plain_end, {"eos_token": "</s>"}), 4)
    rng = random.Random(6)
    system = {"role": "system", "content": " ".join(rng.choice(WORDS) for _ in range(800))}
    for _ in range(2):
        user = {"role": "user", "content": " ".join(rng.choice(WORDS) for _ in range(30))}
        rendered = ChatTemplate(plain_end).render([system, user])
        ids = tokenizer.token_ids(PromptText(messages=[system, user]))
        assert ids.tolist() == raw.encode(rendered, add_special_tokens=False).ids
    completion = PromptTokenizer.from_files(str(files[0]), str(files[1]), 4)
    begun = completion._tokenization("hello world" * 100 + END + "\nhello" * 100, special=True)
    assert not any(piece.opens for piece in begun._cutter.next_pieces(100))


def test_a_piece_ends_at_a_message_end_its_own_length_past_its_start() -> None:
    """At least `CHECK_CHARS` past the piece's start (the marks' checks hold there) and
    before the text's last `CHECK_CHARS`; named by its own text."""

    def encode(texts: list[str]) -> list[list[int]]:
        return [[ord(c) for c in t] for t in texts]  # every cut good

    ends = re.compile(re.escape(END))
    short = "a" * 10 + END  # too close to the start: not cut
    text = short + "b" * 300 + END + "\n" + "c" * 100 + END + "d" * 20
    cutter = Cutter(text, b"plain", CutChecks(encode), ends=ends)  # type: ignore[arg-type]
    pieces = cutter.next_pieces(10)
    first = len(short) + 300 + len(END)
    assert [(p.end, p.opens) for p in pieces] == [(first, True), (len(text), False)]
    other = text[:first] + "zzz" * 50
    again = Cutter(other, b"plain", CutChecks(encode), ends=ends)  # type: ignore[arg-type]
    assert again.next_pieces(1)[0].name == pieces[0].name
    assert again.can_cut_at(first) and not again.can_cut_at(first - 1)
