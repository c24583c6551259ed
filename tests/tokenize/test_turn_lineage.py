"""Conversations in flight on one system prompt share a lineage of marks (docs/h174)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from kinference.kvcache.blocks import PromptBlocks
from kinference.tokenize.template import ChatTemplate
from kinference.tokenize.tokenizer import PromptText, PromptTokenizer
from tests.tokenize.files import WORDS, write_model

CONVERSATIONS = 16  # the Pick bench's chat-spread x16


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_model(tmp_path_factory.mktemp("model"))


def _words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) + rng.choice(["", ",", ".\n"]) for _ in range(count))


def test_sixteen_conversations_on_one_system_prompt_resume_at_their_own_last_turn(
    files: tuple[Path, Path],
) -> None:
    """Turns taken in turn, each tokenized to its end: every conversation's next turn resumes
    at its previous turn's end, though the other 15 left their marks in the same lineage
    meanwhile (a bound of 64 marks per lineage dropped them: each next turn walked its
    history again from the system prompt's end)."""
    rng = random.Random(11)
    tokenizer = PromptTokenizer.from_files(str(files[0]), str(files[1]), 4)
    template = ChatTemplate.from_file(str(files[1]))
    system = {"role": "system", "content": _words(rng, 3000)}
    histories = [[system] for _ in range(CONVERSATIONS)]
    ends = [0] * CONVERSATIONS  # each conversation's previous turn's text length
    for turn in range(4):
        for n, history in enumerate(histories):
            if turn:
                history.append({"role": "assistant", "content": _words(rng, 60)})
            history.append({"role": "user", "content": _words(rng, 30)})
            begun = tokenizer.start(PromptText(messages=history))
            assert not isinstance(begun, PromptBlocks)
            if turn:
                assert begun.position == ends[n], (turn, n)
            begun.advance()
            ends[n] = len(template.render(history))
