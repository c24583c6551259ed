"""Prompts tokenized as the engine does: chat template, special tokens, block naming, and turn
reuse that never changes the tokens."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from kinference.kvcache.blocks import identities
from kinference.tokenize.pieces import WINDOW_CHARS, encode_windows
from kinference.tokenize.reuse import CHUNK_CHARS, TurnCache
from kinference.tokenize.template import ChatTemplate, TemplateError
from kinference.tokenize.tokenizer import PromptText, PromptTokenizer, Untokenizable
from tests.tokenize.files import WORDS, write_model


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_model(tmp_path_factory.mktemp("model"))


@pytest.fixture
def tokenizer(files: tuple[Path, Path]) -> PromptTokenizer:
    return PromptTokenizer.from_files(str(files[0]), str(files[1]), 4)


def test_chat_is_rendered_through_the_template_and_not_given_special_tokens(
    tokenizer: PromptTokenizer, files: tuple[Path, Path]
) -> None:
    messages = [{"role": "system", "content": "hello world"}, {"role": "user", "content": "fox"}]
    raw = Tokenizer.from_file(str(files[0]))
    text = "<|im_start|>system\nhello world<|im_end|>\n<|im_start|>user\nfox<|im_end|>\n"
    expected = raw.encode(text + "<|im_start|>assistant\n", add_special_tokens=False).ids
    assert tokenizer.token_ids(PromptText(messages=messages)).tolist() == expected
    blocks = tokenizer.blocks(PromptText(messages=messages))
    assert blocks.tokens == len(expected) and blocks.block_size == 4
    assert list(blocks.blocks) == identities(expected, 4)


def test_text_parts_are_joined_with_newlines(tokenizer: PromptTokenizer) -> None:
    parts = [
        {"type": "text", "text": "hello"},
        {"type": "image_url"},
        {"type": "text", "text": "x"},
    ]
    joined = tokenizer.token_ids(PromptText(messages=[{"role": "user", "content": "hello\nx"}]))
    split = tokenizer.token_ids(PromptText(messages=[{"role": "user", "content": parts}]))
    assert joined.tolist() == split.tolist()


def test_completion_and_token_id_prompts(tokenizer: PromptTokenizer) -> None:
    assert len(tokenizer.token_ids(PromptText(prompt="the quick brown fox"))) > 0
    assert tokenizer.token_ids(PromptText(token_ids=(5, 6, 7))).tolist() == [5, 6, 7]
    with pytest.raises(Untokenizable):
        tokenizer.token_ids(PromptText())


def test_chat_without_template_or_with_a_failing_one(files: tuple[Path, Path]) -> None:
    bare = PromptTokenizer.from_files(str(files[0]), None, 4)
    with pytest.raises(Untokenizable, match="chat_template"):
        bare.token_ids(PromptText(messages=[{"role": "user", "content": "x"}]))
    failing = PromptTokenizer(
        Tokenizer.from_file(str(files[0])), ChatTemplate("{{ raise_exception('no tools') }}"), 4
    )
    with pytest.raises(Untokenizable, match="no tools"):
        failing.token_ids(PromptText(messages=[]))


def test_template_files(tmp_path: Path) -> None:
    jinja = tmp_path / "t.jinja"
    jinja.write_text("{{ bos_token }}{{ messages[0]['content'] }}")
    assert ChatTemplate.from_file(str(jinja)).render([{"content": "a"}]) == "a"
    config = tmp_path / "tokenizer_config.json"
    named = [{"name": "default", "template": "{{ bos_token }}!"}, {"name": "tool_use"}]
    config.write_text(json.dumps({"chat_template": named, "bos_token": {"content": "<s>"}}))
    assert ChatTemplate.from_file(str(config)).render([]) == "<s>!"
    config.write_text("{}")
    with pytest.raises(TemplateError, match="no chat_template"):
        ChatTemplate.from_file(str(config))
    with pytest.raises(TemplateError, match="does not compile"):
        ChatTemplate("{% for %}")
    sandboxed = ChatTemplate("{{ messages.__class__.__mro__ }}")
    with pytest.raises(TemplateError):
        sandboxed.render([])


def _conversation(rng: random.Random, turns: int, words: int) -> list[list[dict[str, str]]]:
    history: list[dict[str, str]] = [{"role": "system", "content": _words(rng, words)}]
    result = []
    for _ in range(turns):
        history = [*history, {"role": "user", "content": _words(rng, rng.randint(5, words))}]
        result.append(history)
        history = [*history, {"role": "assistant", "content": _words(rng, rng.randint(5, 400))}]
    return result


def _words(rng: random.Random, count: int) -> str:
    return " ".join(
        rng.choice(WORDS) + rng.choice(["", "", ",", ".\n", "  "]) for _ in range(count)
    )


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**31))
def test_turn_reuse_gives_the_tokens_of_a_full_tokenization(
    files: tuple[Path, Path], seed: int
) -> None:
    rng = random.Random(seed)
    reusing = PromptTokenizer.from_files(str(files[0]), str(files[1]), 4)
    fresh = Tokenizer.from_file(str(files[0]))
    template = ChatTemplate.from_file(str(files[1]))
    for messages in _conversation(rng, turns=4, words=900):
        text = template.render(messages)
        expected = fresh.encode(text, add_special_tokens=False).ids
        assert reusing.token_ids(PromptText(messages=messages)).tolist() == expected
    assert reusing.cache.reused_tokens > 0


def test_reuse_tokenizes_only_the_new_part(tokenizer: PromptTokenizer) -> None:
    rng = random.Random(1)
    turns = _conversation(rng, turns=3, words=3000)
    for messages in turns:
        tokenizer.token_ids(PromptText(messages=messages))
    cache = tokenizer.cache
    assert cache.reused_tokens > 0
    last = len(tokenizer._template.render(turns[-1]))  # type: ignore[union-attr]
    assert cache.encoded_chars < last * 1.6  # about one full text, not three


def test_cache_is_bounded_in_tokens() -> None:
    cache = TurnCache(max_tokens=1000)

    def encode(text: str, special: bool) -> tuple:
        import numpy as np

        ids = np.arange(len(text) // 4, dtype=np.uint32)
        return ids, np.arange(0, len(ids) * 4, 4, dtype=np.int64)

    for i in range(10):
        cache.encode(str(i) * (CHUNK_CHARS + 100), False, encode)
    assert cache._held <= 1000
    assert len(cache._by_key) <= 2


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**31), st.integers(2 * WINDOW_CHARS + 1, 12 * WINDOW_CHARS))
def test_windows_give_the_tokens_of_one_encode(
    files: tuple[Path, Path], seed: int, size: int
) -> None:
    rng = random.Random(seed)
    text = _words(rng, size // 4)[:size]
    raw = Tokenizer.from_file(str(files[0]))
    tokenizer = PromptTokenizer.from_files(str(files[0]), None, 4)
    for special in (False, True):
        ids, starts = tokenizer._encode(text, special)
        expected = raw.encode(text, add_special_tokens=special)
        assert ids.tolist() == expected.ids
        assert starts.tolist() == [start for start, _ in expected.offsets]


def test_windows_fall_back_when_they_disagree() -> None:
    import numpy as np

    calls: list[int] = []

    def encode(texts: object, special: bool) -> list[tuple]:
        batch = list(texts)  # type: ignore[call-overload]
        calls.append(len(batch))
        # Every window starts with a token no whole text has at that offset: no agreement.
        return [
            (np.arange(len(t), dtype=np.uint32) + i, np.arange(len(t), dtype=np.int64))
            for i, t in enumerate(batch)
        ]

    ids, _ = encode_windows("x" * (3 * WINDOW_CHARS), False, encode)
    assert calls[-1] == 1 and len(ids) == 3 * WINDOW_CHARS  # encoded whole at the end
