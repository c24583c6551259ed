"""A conversation's next turn resumes at the previous turn's last checked cut (at its end
or where its Pick stopped): the same tokens and blocks as a tokenization from scratch,
only the new part walked; a text that
differs before a mark does not resume from it; marks are bounded."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from kinference.kvcache.blocks import PromptBlocks, identities
from kinference.tokenize.template import ChatTemplate
from kinference.tokenize.tokenizer import PromptText, PromptTokenizer
from kinference.tokenize.turns import MAX_PER_LINEAGE, Leading, Mark, PrefixDigest, TurnMarks
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
    assert len(tokenizer.marks) == 3  # at its last cut, the previous step's and its end
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


def test_marks_are_bounded_in_the_texts_they_keep() -> None:
    """A mark keeps the text it was left on: marks near the start of long prompts, few
    tokens each, are bounded by those texts' bytes (each text once, however many marks)."""
    marks = TurnMarks(max_text_bytes=100_000)
    empty = np.zeros(0, dtype=np.uint32)
    text = "s" * 300 + "t" * 20_000
    for position in (1000, 2000, 3000):  # one text, three marks: counted once
        marks.put(b"plain", text, Mark(position, 1, 1, 10, (), empty, ()))
    assert len(marks) == 3 and 20_300 < marks.text_bytes < 21_000
    for lineage in range(8):
        long = f"{lineage}" * 300 + "u" * 30_000
        marks.put(b"plain", long, Mark(1000, 1, 1, 10, (), empty, ()))
        assert marks.text_bytes <= 100_000
    assert len(marks) == 3  # three 30 KB texts fit; the rest, oldest first, were dropped
    found = marks.find(b"plain", "7" * 300 + "u" * 30_000)
    assert found is not None and found.position == 1000
    # A mark over the token bound drops every mark, itself last: no text's count is left.
    marks.put(b"plain", "x" * 400, Mark(100, 1, 1, 10**9, (), empty, ()))
    assert marks.text_bytes == 0 and len(marks) == 0


def _digest(kind: bytes, text: str) -> bytes:
    return hashlib.blake2b(kind + text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def test_a_prefix_digest_goes_on_from_its_last_end_as_a_digest_from_the_start() -> None:
    text = "abc é 日本 \ud800 " * 300  # multi-byte characters and a lone surrogate
    prefix = PrefixDigest(b"plain", text)
    for end in (10, 500, 501, 2000, 40, 3000, len(text)):  # 40: smaller, starts over
        assert prefix.at(end) == _digest(b"plain", text[:end])
    at = prefix.checkpoint()
    prefix.at(len(text))
    prefix.restore(at)
    assert prefix.at(len(text)) == _digest(b"plain", text)


def test_marks_put_through_the_prefix_find_left_are_found_as_marks_put_alone() -> None:
    """`find` leaves the prefix at the mark it found; a tokenization's later marks go on
    from there: they are the marks a fresh `put` leaves."""
    empty = np.zeros(0, dtype=np.uint32)
    text = "g" * 300 + "h" * 6000
    alone, shared = TurnMarks(), TurnMarks()
    for marks in (alone, shared):
        marks.put(b"plain", text, Mark(1000, 1, 1, 10, (), empty, ()))
        marks.put(b"plain", text + "i", Mark(3000, 1, 1, 10, (), empty, ()))  # further on
    prefix = PrefixDigest(b"plain", text)
    found = shared.find(b"plain", text, prefix)
    assert found is not None and found.position == 3000  # a text up to there the same
    for position in (4000, 5000):
        alone.put(b"plain", text, Mark(position, 1, 1, 10, (), empty, ()))
        shared.put(b"plain", text, Mark(position, 1, 1, 10, (), empty, ()), prefix)
    for marks in (alone, shared):
        found = marks.find(b"plain", text + "j")
        assert found is not None and found.position == 5000
    assert len(alone) == len(shared) == 4


def test_a_marks_leading_items_stay_as_they_were_while_its_list_grows() -> None:
    items = list(range(10))
    leading = Leading(items, 6)
    items.extend(range(10, 20))
    assert list(leading) == [0, 1, 2, 3, 4, 5] and len(leading) == 6
    assert leading[-1] == 5 and leading[2:4] == [2, 3] and leading[:] == items[:6]
    with pytest.raises(IndexError):
        leading[6]


def test_a_tokenization_under_way_catches_up_with_a_further_one(
    files: tuple[Path, Path],
) -> None:
    """Two new conversations on one new system prompt: the first stops early (its Pick
    needed no more), the second walks the whole prompt; the first's next slice goes on
    from the second's mark at the system prompt's end, with the full tokenization's tokens.
    A text that differs before a further mark does not catch up to it."""
    rng = random.Random(11)
    tokenizer = PromptTokenizer.from_files(str(files[0]), str(files[1]), 4)
    whole = Tokenizer.from_file(str(files[0]))
    template = ChatTemplate.from_file(str(files[1]))
    system = {"role": "system", "content": _words(rng, 4000)}
    texts = [[system, {"role": "user", "content": _words(rng, 60)}] for _ in range(2)]
    edited = [{"role": "system", "content": system["content"][:3000] + " zebra"}, texts[0][1]]
    first, second, third = (tokenizer.start(PromptText(messages=t)) for t in [*texts, edited])
    assert not isinstance(first, PromptBlocks) and not isinstance(second, PromptBlocks)
    assert not isinstance(third, PromptBlocks)
    first.advance(budget_chars=512)
    third.advance(budget_chars=512)
    behind = first._cutter.position
    second.advance()
    hits, resumed = tokenizer.cache.hits, tokenizer.marks.resumed
    first.advance()
    rendered = template.render(texts[0])
    # From the system prompt's end: none of its pieces walked again.
    assert tokenizer.marks.resumed == resumed + 1 and tokenizer.cache.hits == hits
    assert 0 < behind < len(template.render([system])) - 1000
    assert first.ids().tolist() == whole.encode(rendered, add_special_tokens=False).ids
    assert first.result().blocks == tuple(
        identities(np.asarray(whole.encode(rendered, add_special_tokens=False).ids), 4)
    )
    assert not third.catch_up()  # its text parts from theirs before their marks
    third.advance()
    expected = whole.encode(template.render(edited), add_special_tokens=False).ids
    assert third.ids().tolist() == expected
