"""A conversation's next turn resumes at the previous turn's last checked cut (at its end
or where its Pick stopped): the same tokens and blocks as a tokenization from scratch,
only the new part walked; a text that
differs before a mark does not resume from it; marks are bounded."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from kinference.kvcache.blocks import PromptBlocks, identities
from kinference.tokenize.template import ChatTemplate
from kinference.tokenize.tokenizer import PromptText, PromptTokenizer
from kinference.tokenize.turns import MAX_PER_LINEAGE, Mark, TurnMarks
from tests.tokenize.files import WORDS, write_model


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_model(tmp_path_factory.mktemp("model"))


def _words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) + rng.choice(["", ",", ".\n"]) for _ in range(count))


def test_turns_resume_with_the_tokens_and_blocks_of_a_fresh_tokenization(
    files: tuple[Path, Path],
) -> None:
    rng = random.Random(7)
    tokenizer = PromptTokenizer.from_files(str(files[0]), str(files[1]), 4)
    whole = Tokenizer.from_file(str(files[0]))
    template = ChatTemplate.from_file(str(files[1]))
    history = [{"role": "system", "content": _words(rng, 4000)}]
    walked = []
    for _ in range(5):
        history = [*history, {"role": "user", "content": _words(rng, 60)}]
        text = PromptText(messages=history)
        begun = tokenizer.start(text)
        assert not isinstance(begun, PromptBlocks)
        before = tokenizer.cache.hits + tokenizer.cache.encoded_chars
        begun.advance()
        walked.append(tokenizer.cache.hits + tokenizer.cache.encoded_chars - before)
        expected = whole.encode(template.render(history), add_special_tokens=False).ids
        assert begun.ids().tolist() == expected
        assert begun.result().blocks == tuple(identities(np.asarray(expected), 4))
        history = [*history, {"role": "assistant", "content": _words(rng, 80)}]
    assert tokenizer.marks.resumed == 4
    assert max(walked[1:]) < walked[0] / 4  # the later turns passed their history at once


def test_a_turn_stopped_partway_leaves_a_mark_the_next_turn_resumes_from(
    files: tuple[Path, Path],
) -> None:
    """A Pick's tokenization stops where no worker holds the prompt; its rest may never be
    tokenized before the next turn (Picks come first), so the stop leaves a mark too."""
    rng = random.Random(9)
    tokenizer = PromptTokenizer.from_files(str(files[0]), str(files[1]), 4)
    whole = Tokenizer.from_file(str(files[0]))
    template = ChatTemplate.from_file(str(files[1]))
    history = [
        {"role": "system", "content": _words(rng, 4000)},
        {"role": "user", "content": _words(rng, 60)},
    ]
    first = tokenizer.start(PromptText(messages=history))
    assert not isinstance(first, PromptBlocks)
    assert first.advance(lambda blocks: min(len(blocks), 200)) is True  # none held further
    assert not first.done and len(tokenizer.marks) == 2  # its last step's cut and the one before
    history = [*history, {"role": "assistant", "content": _words(rng, 80)}]
    history = [*history, {"role": "user", "content": _words(rng, 60)}]
    expected = whole.encode(template.render(history), add_special_tokens=False).ids
    blocks = tuple(identities(np.asarray(expected), 4))
    second = tokenizer.start(PromptText(messages=history))
    assert not isinstance(second, PromptBlocks)
    # Resumed past the first one's stop (its last step's cut), not at the end.
    assert tokenizer.marks.resumed == 1 and 200 < len(second.blocks) < len(blocks) / 2
    second.advance()
    assert second.ids().tolist() == expected
    assert second.result().blocks == blocks


def test_conversations_on_one_long_system_prompt_resume_within_it(
    files: tuple[Path, Path],
) -> None:
    """Each conversation's first turn differs from the others' after the shared system
    prompt: it resumes from a mark a step before another's end, not from the start."""
    rng = random.Random(10)
    tokenizer = PromptTokenizer.from_files(str(files[0]), str(files[1]), 4)
    whole = Tokenizer.from_file(str(files[0]))
    template = ChatTemplate.from_file(str(files[1]))
    system = {"role": "system", "content": _words(rng, 8000)}
    walked = []
    for _ in range(3):
        history = [system, {"role": "user", "content": _words(rng, 300)}]
        before = tokenizer.cache.hits + tokenizer.cache.encoded_chars
        ids = tokenizer.token_ids(PromptText(messages=history))
        walked.append(tokenizer.cache.hits + tokenizer.cache.encoded_chars - before)
        assert ids.tolist() == whole.encode(template.render(history), add_special_tokens=False).ids
    assert tokenizer.marks.resumed == 2
    assert max(walked[1:]) < walked[0] / 2


def test_a_text_that_differs_before_a_mark_does_not_resume_from_it(
    files: tuple[Path, Path],
) -> None:
    rng = random.Random(8)
    tokenizer = PromptTokenizer.from_files(str(files[0]), str(files[1]), 4)
    whole = Tokenizer.from_file(str(files[0]))
    first = _words(rng, 3000)
    tokenizer.token_ids(PromptText(prompt=first))
    assert len(tokenizer.marks) == 2  # at its last cut and at the previous step's
    changed = first[:2000] + "zebra" + first[2005:] + " more"  # same start, edited middle
    ids = tokenizer.token_ids(PromptText(prompt=changed))
    assert ids.tolist() == whole.encode(changed).ids
    assert tokenizer.marks.resumed == 0


def test_marks_are_bounded_per_lineage_and_in_all() -> None:
    marks = TurnMarks(max_marks=3 * MAX_PER_LINEAGE)
    empty = np.zeros(0, dtype=np.uint32)

    def mark(position: int) -> Mark:
        return Mark(position, 1, 1, position, (), empty, ())

    text = "a" * 400 + "b" * 4000
    for position in range(300, 300 + 2 * MAX_PER_LINEAGE):
        marks.put(b"plain", text, mark(position))
    assert len(marks) == MAX_PER_LINEAGE
    found = marks.find(b"plain", text)
    assert found is not None and found.position == 300 + 2 * MAX_PER_LINEAGE - 1
    assert marks.find(b"special", text) is None  # another kind: another lineage
    for lineage in range(4):
        other = f"{lineage}" * 300 + "c" * 4000
        for position in range(300, 300 + MAX_PER_LINEAGE):
            marks.put(b"plain", other, mark(position))
    assert len(marks) <= 3 * MAX_PER_LINEAGE
    assert marks.find(b"plain", text) is None  # the least recently used lineage went


def test_a_lineage_over_the_token_bound_keeps_its_newest_marks() -> None:
    """One long shared system prompt: its one lineage goes over the bound mark by mark; its
    oldest marks go, not all of them."""
    marks = TurnMarks(max_tokens=10_000)
    empty = np.zeros(0, dtype=np.uint32)
    text = "e" * 300 + "f" * 8000
    for position in range(1000, 6000, 1000):
        marks.put(b"plain", text, Mark(position, 1, 1, 3000, (), empty, ()))
    assert len(marks) == 3
    found = marks.find(b"plain", text)
    assert found is not None and found.position == 5000


def test_marks_are_bounded_in_the_tokens_they_hold() -> None:
    marks = TurnMarks(max_tokens=10_000)
    empty = np.zeros(0, dtype=np.uint32)
    for lineage in range(5):
        text = f"{lineage}" * 300 + "d" * 4000
        marks.put(b"plain", text, Mark(1000, 1, 1, 3000, (), empty, ()))
    assert len(marks) == 3  # 9000 tokens held; a fourth lineage dropped the oldest
