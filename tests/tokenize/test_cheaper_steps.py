"""h204's cheaper steps of a Pick's tokenization give what the steps they replace gave:
short texts encoded by the batch call off the tokenizer thread (the same ids), marks found
in their kept order instead of sorted at each `find` (the same mark, against the sort as an
oracle), long strings looked for without a generator (the same answer)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from kinference.kvcache.blocks import identities
from kinference.tokenize.pieces import CHECK_CHARS
from kinference.tokenize.stand_in import holds_long
from kinference.tokenize.template import ChatTemplate
from kinference.tokenize.tokenizer import PromptText, PromptTokenizer
from kinference.tokenize.turns import Mark, PrefixDigest, TurnMarks
from tests.tokenize.files import WORDS, write_model, zoo

BS = 4
_PARTS = [*"abc xyz 0189\n\t.,'", " the", " 1348", "é", "日本", "\U0001f600", "<|im_end|>"]
_TEXT = st.lists(st.sampled_from(_PARTS), max_size=200).map("".join)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_model(tmp_path_factory.mktemp("model"))


def _pair(files: tuple[Path, Path]) -> tuple[PromptTokenizer, PromptTokenizer]:
    """The same tokenizer twice: short texts encoded holding the GIL (the thread's way),
    and by the batch call (a Pick's first steps on the event loop's thread)."""
    made = [
        PromptTokenizer.from_files(str(files[0]), str(files[1]), BS, hold_gil=lambda held=h: held)
        for h in (True, False)
    ]
    return made[0], made[1]


@pytest.mark.parametrize("kind", [*zoo(), "tiny"])
@settings(max_examples=40, deadline=None)
@given(texts=st.lists(_TEXT, min_size=1, max_size=4))
def test_short_texts_off_the_thread_give_the_ids_held_ones_give(
    kind: str, texts: list[str], files: tuple[Path, Path]
) -> None:
    source = zoo()[kind] if kind != "tiny" else files[0].read_text()
    raw = Tokenizer.from_str(source)
    held, batched = (
        PromptTokenizer(Tokenizer.from_str(source), None, BS, hold_gil=lambda h=h: h)
        for h in (True, False)
    )
    for special in (False, True):
        expected = [raw.encode(text, add_special_tokens=special).ids for text in texts]
        for tokenizer in (held, batched):
            got = tokenizer._encode(texts, special)
            assert [ids.tolist() for ids in got] == expected


def test_conversations_tokenized_off_the_thread_give_the_same_ids_and_blocks(
    files: tuple[Path, Path],
) -> None:
    """Follow-up turns (their history resumed at marks), unicode and a long history: both
    ways give every turn's tokens and blocks, the whole text's."""
    rng = random.Random(16)
    whole = Tokenizer.from_file(str(files[0]))
    template = ChatTemplate.from_file(str(files[1]))
    held, batched = _pair(files)
    system = " ".join(rng.choice(WORDS) for _ in range(3000))
    history: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for turn in range(8):
        words = [rng.choice([*WORDS, "é", "日本語", "\U0001f600", " 1348 1068"]) for _ in range(60)]
        history = [*history, {"role": "user", "content": " ".join(words)}]
        expected = whole.encode(template.render(history), add_special_tokens=False).ids
        for tokenizer in (held, batched):
            begun = tokenizer.start(PromptText(messages=history))
            assert not isinstance(begun, np.ndarray) and hasattr(begun, "advance")
            begun.advance(budget_chars=None if turn % 2 else 300)  # some stop partway
            begun.advance()
            assert begun.ids().tolist() == expected
            blocks = begun.result().blocks
            assert blocks == tuple(identities(np.asarray(expected, np.uint32), BS))
        reply = " ".join(str(rng.randrange(2000)) for _ in range(40))
        history = [*history, {"role": "assistant", "content": " " + reply}]
    assert held.marks.resumed == batched.marks.resumed > 0


def _cut_ok(position: int) -> bool:
    return position % 3 != 0


def _sorted_find(
    marks: TurnMarks, text: str, kind: bytes = b"plain", beyond: int = 0
) -> Mark | None:
    """`TurnMarks.find` as it was (every candidate sorted at each call), without its
    effects: the oracle."""
    lineage = marks._lineages.get(PrefixDigest(kind, text).lead)
    if not lineage:
        return None
    kept = sorted(
        (i for i in lineage.items() if beyond < i[1].mark.position <= len(text) - CHECK_CHARS),
        key=lambda item: (-item[1].mark.position, item[1].mark.ends),
    )
    for _, found in kept:
        if found.fits(text) and (not found.mark.ends or _cut_ok(found.mark.position)):
            return found.mark
    return None


@settings(max_examples=80, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["put", "find"]),
            st.integers(0, 5),  # which text
            st.integers(CHECK_CHARS + 1, 800),  # a mark's position (put past a text: none)
            st.booleans(),  # Mark.ends
            st.integers(0, 400),  # find's `beyond`
        ),
        max_size=120,
    ),
    bound=st.integers(3, 40),
)
def test_find_answers_as_sorting_every_candidate_did(
    steps: list[tuple[str, int, int, bool, int]], bound: int
) -> None:
    """Texts that share their first part (one lineage) and differ after it, marks put at
    random positions (some at the same ones), dropped by the bounds: `find` gives the mark
    the sort gave, whatever was put and dropped before."""
    rng = random.Random(3)
    lead = "".join(rng.choice("abc ") for _ in range(300))
    texts = [lead + "".join(rng.choice("xyz ") for _ in range(500)) for _ in range(3)]
    texts += [t[: 300 + rng.randrange(200)] + "q" * 100 for t in texts]  # shorter, other ends
    marks = TurnMarks(max_marks=bound)
    empty = np.zeros(0, dtype=np.uint32)
    for step, which, position, ends, beyond in steps:
        text = texts[which]
        if step == "put":
            marks.put(b"plain", text, Mark(position, 1, 1, 10, (), empty, (), ends=ends))
            continue
        expected = _sorted_find(marks, text, beyond=beyond)
        assert marks.find(b"plain", text, cut_ok=_cut_ok, beyond=beyond) is expected


@settings(max_examples=200, deadline=None)
@given(
    value=st.recursive(
        st.none() | st.integers() | st.text(max_size=12),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner),
        max_leaves=20,
    ),
    minimum=st.integers(0, 13),
)
def test_holds_long_answers_as_the_generator_did(value: Any, minimum: int) -> None:
    def oracle(value: Any) -> bool:
        if isinstance(value, str):
            return len(value) >= minimum
        if isinstance(value, dict):
            return any(oracle(v) for v in value.values())
        if isinstance(value, list):
            return any(oracle(v) for v in value)
        return False

    assert holds_long(value, minimum) is oracle(value)


def test_find_passes_over_marks_too_near_the_texts_end_as_the_sort_did() -> None:
    """A mark less than `CHECK_CHARS` from the text's end (its own text's end, here) is not
    taken: an earlier one is, as the sort found it."""
    text = "a" * 300 + "b" * 300
    marks, empty = TurnMarks(), np.zeros(0, dtype=np.uint32)
    marks.put(b"plain", text, Mark(100, 1, 1, 10, (), empty, ()))
    marks.put(b"plain", text, Mark(len(text) - 10, 1, 1, 10, (), empty, (), ends=True))
    found = marks.find(b"plain", text, cut_ok=lambda position: True)
    assert found is _sorted_find(marks, text) is not None and found.position == 100
