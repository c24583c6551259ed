"""A tokenization that reaches its text's end leaves a mark there; a longer next text whose
cut at that end is a candidate that checks good resumes there, tokenizing only its new
text: the tokens and blocks of a tokenization from scratch either way."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from kinference.kvcache.blocks import PromptBlocks, identities
from kinference.tokenize.pieces import CHECK_CHARS
from kinference.tokenize.template import ChatTemplate
from kinference.tokenize.tokenizer import PromptText, PromptTokenizer
from kinference.tokenize.turns import LEAD_CHARS, Mark, TurnMarks
from tests.tokenize.files import WORDS, write_model, zoo

_ODD = ["  ", "\n\n", " \n", "\t", "42", "1234", "don't", "é", "日本", "<|im_start|>", "\u0301"]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_model(tmp_path_factory.mktemp("model"))


def _more(rng: random.Random, chars: int, least: int = 1) -> str:
    """Words, and what tokenizers treat specially, to go on a text with (at any cut)."""
    parts: list[str] = []
    while sum(map(len, parts)) < chars:
        parts.append(rng.choice(WORDS) if rng.random() < 0.75 else rng.choice(_ODD))
        parts.append(rng.choice([" ", " ", "\n", "", ". "]))
    return "".join(parts)[: rng.randint(least, chars)]


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 2**31), st.sampled_from(sorted(zoo())), st.booleans())
def test_texts_going_on_past_an_earlier_texts_end_tokenize_as_the_whole_text(
    seed: int, kind: str, special: bool
) -> None:
    rng = random.Random(seed)
    raw = Tokenizer.from_str(zoo()[kind])
    tokenizer = PromptTokenizer(Tokenizer.from_str(zoo()[kind]), None, 4)
    text = _more(rng, 3000, 1000)
    for _ in range(8):
        text += _more(rng, 400)
        begun = tokenizer._tokenization(text, special)  # special: as a completion prompt
        begun.advance()
        expected = raw.encode(text, add_special_tokens=special).ids
        assert begun.ids().tolist() == expected
        assert begun.result().blocks == tuple(identities(np.asarray(expected, np.uint32), 4))


@settings(max_examples=6, deadline=None)
@given(st.integers(0, 2**31))
def test_chat_turns_resume_at_the_previous_turns_end(files: tuple[Path, Path], seed: int) -> None:
    """Each turn tokenizes its new text and the check of the cut at the previous end only
    (not the previous turn's last piece again), with the tokens of the whole text."""
    rng = random.Random(seed)
    tokenizer = PromptTokenizer.from_files(str(files[0]), str(files[1]), 4)
    whole = Tokenizer.from_file(str(files[0]))
    template = ChatTemplate.from_file(str(files[1]))
    history = [{"role": "system", "content": _more(rng, 6000, 3000)}]
    before = ""
    for turn in range(6):
        history = [*history, {"role": "user", "content": rng.choice(WORDS) + _more(rng, 300)}]
        rendered = template.render(history)
        begun = tokenizer.start(PromptText(messages=history))
        assert not isinstance(begun, PromptBlocks)
        begun.advance()
        expected = whole.encode(rendered, add_special_tokens=False).ids
        assert begun.ids().tolist() == expected
        assert begun.result().blocks == tuple(identities(np.asarray(expected, np.uint32), 4))
        if turn:  # the new text, and the three encodes of the check at the previous end
            assert rendered.startswith(before)
            assert begun.encoded_chars <= len(rendered) - len(before) + 4 * CHECK_CHARS
        before = rendered
        reply = rng.choice(WORDS) + _more(rng, 300)
        history = [*history, {"role": "assistant", "content": reply}]


def test_a_mark_at_a_texts_end_is_taken_only_where_the_cut_there_is_good() -> None:
    marks = TurnMarks()
    empty = np.zeros(0, dtype=np.uint32)
    text = "k" * 300 + "l" * 3000
    marks.put(b"plain", text, Mark(2000, 1, 1, 10, (), empty, ()))
    marks.put(b"plain", text, Mark(len(text), 2, 1, 20, (), empty, (), ends=True))
    longer = text + " m" * 40
    asked: list[int] = []

    def refuse(position: int) -> bool:
        asked.append(position)
        return False

    found = marks.find(b"plain", longer, cut_ok=refuse)
    assert found is not None and found.position == 2000 and asked == [len(text)]
    found = marks.find(b"plain", longer, cut_ok=lambda position: True)
    assert found is not None and found.ends and found.position == len(text)
    assert marks.find(b"plain", longer) is not None  # no check given: not at the end
    assert marks.find(b"plain", text + " m", cut_ok=lambda position: True).position == 2000  # type: ignore[union-attr]
    changed = text[:-1] + "x" + " m" * 40  # differs before the end: that mark is not its
    found = marks.find(b"plain", changed, cut_ok=lambda position: True)
    assert found is not None and found.position == 2000


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31))
def test_the_mark_found_is_the_furthest_whose_text_is_the_same_up_to_it(seed: int) -> None:
    """Marks left on texts that share their start and part ways anywhere (an edited
    message, another conversation), found by comparing texts: the furthest mark whose text
    up to its `through` is the asked text's (the newest of equal ones), as from scratch."""
    rng = random.Random(seed)
    marks, left = TurnMarks(), []
    empty = np.zeros(0, dtype=np.uint32)
    base = "n" * 300 + "".join(rng.choice("ab \n") for _ in range(600))
    texts = [base]
    for _ in range(12):
        parent = rng.choice(texts)
        cut = rng.randint(250, len(parent))
        texts.append(parent[:cut] + "".join(rng.choice("ab \n") for _ in range(200)))
    for _ in range(40):
        text = rng.choice(texts)
        ends = rng.random() < 0.3
        position = len(text) if ends else rng.randint(1, len(text) - CHECK_CHARS)
        mark = Mark(position, 1, 1, 1, (), empty, (), ends=ends)
        marks.put(b"plain", text, mark)
        left.append((mark, text))
    for asked in [*texts, *(t + " ab" * 20 for t in texts)]:
        good = rng.random() < 0.5
        fitting = [m for m, t in reversed(left) if _fits(m, t, asked, good)]
        expected = max(fitting, key=lambda m: (m.position, not m.ends), default=None)
        found = marks.find(b"plain", asked, cut_ok=(lambda position: True) if good else None)
        assert found is expected


def _fits(mark: Mark, text: str, asked: str, good: bool) -> bool:
    """From scratch: `asked` may resume at `mark`, left on `text` (of its lineage)."""
    if mark.position + CHECK_CHARS > len(asked) or asked[: mark.through] != text[: mark.through]:
        return False
    if asked[:LEAD_CHARS] != text[:LEAD_CHARS]:
        return False
    return not mark.ends or good
