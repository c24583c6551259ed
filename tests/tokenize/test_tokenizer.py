"""Prompts tokenized as the engine does: chat template, special tokens, block naming, and
pieces and their reuse across turns, which never change the tokens."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, models, pre_tokenizers

from kinference.kvcache.blocks import PromptBlocks, identities
from kinference.tokenize.pieces import FIRST_PIECES_CHARS, PIECE_CHARS
from kinference.tokenize.reuse import PieceCache
from kinference.tokenize.template import ChatTemplate, TemplateError
from kinference.tokenize.tokenizer import PromptText, PromptTokenizer, Untokenizable
from tests.tokenize.files import WORDS, write_model, zoo


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


_ODD = [
    "  ",
    "\n\n",
    " \n",
    "\t",
    "é",
    "日本語",
    "123456",
    "'s",
    " 's",
    "<|im_start|>",
    "ﬁ",
    "\u0301",
]


def _hostile(rng: random.Random, chars: int) -> str:
    """Words and the runs that tokenizers treat specially: whitespace runs, digits, accents,
    contractions, special tokens, ligatures NFKC rewrites, combining marks."""
    parts: list[str] = []
    while sum(map(len, parts)) < chars:
        parts.append(rng.choice(WORDS) if rng.random() < 0.7 else rng.choice(_ODD))
        parts.append(rng.choice([" ", " ", "\n", "", ". "]))
    return "".join(parts)[:chars]


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 2**31), st.sampled_from(sorted(zoo())), st.booleans())
def test_pieces_tokenize_as_the_whole_text(seed: int, kind: str, special: bool) -> None:
    rng = random.Random(seed)
    raw = Tokenizer.from_str(zoo()[kind])
    tokenizer = PromptTokenizer(Tokenizer.from_str(zoo()[kind]), None, 4)
    text = _hostile(rng, rng.randint(1, 12 * PIECE_CHARS))

    def tokens() -> list[int]:
        begun = tokenizer._tokenization(text, special)  # special: as a completion prompt
        begun.advance()
        return begun.ids().tolist()  # type: ignore[no-any-return]

    got = tokens()
    assert got == raw.encode(text, add_special_tokens=special).ids
    assert tokens() == got  # every piece from the cache now


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 2**31))
def test_the_tiny_model_tokenizes_hostile_text_as_a_whole(
    files: tuple[Path, Path], seed: int
) -> None:
    rng = random.Random(seed)
    raw = Tokenizer.from_file(str(files[0]))
    tokenizer = PromptTokenizer.from_files(str(files[0]), str(files[1]), 4)
    text = _hostile(rng, rng.randint(PIECE_CHARS, 10 * PIECE_CHARS))
    messages = [{"role": "system", "content": text}, {"role": "user", "content": text[:500]}]
    rendered = ChatTemplate.from_file(str(files[1])).render(messages)
    got = tokenizer.token_ids(PromptText(messages=messages)).tolist()
    assert got == raw.encode(rendered, add_special_tokens=False).ids


def test_cuts_are_checked_with_the_model_tokenizer() -> None:
    """A tokenizer that adds a space at every text's start makes cuts before letters wrong:
    those are refused, the ones before spaces are kept."""
    raw = Tokenizer.from_str(zoo()["prefix-space"])
    tokenizer = PromptTokenizer(Tokenizer.from_str(zoo()["prefix-space"]), None, 4)
    text = "\n".join(["fox"] * 4000)  # only newline cuts, each refused
    assert tokenizer.token_ids(PromptText(prompt=text)).tolist() == raw.encode(text).ids
    assert len(tokenizer.cache) == 1  # one piece: the whole text
    rng = random.Random(0)
    text = " ".join(rng.choice(WORDS) for _ in range(4000))
    assert tokenizer.token_ids(PromptText(prompt=text)).tolist() == raw.encode(text).ids
    assert len(tokenizer.cache) > 1 + len(text) // (2 * PIECE_CHARS)


@settings(max_examples=10, deadline=None)
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
    assert reusing.marks.resumed > 0  # later turns start where the previous one passed


def test_reuse_tokenizes_only_the_new_part(tokenizer: PromptTokenizer) -> None:
    rng = random.Random(1)
    turns = _conversation(rng, turns=3, words=3000)
    for messages in turns:
        tokenizer.token_ids(PromptText(messages=messages))
    cache = tokenizer.cache
    assert cache.hits + tokenizer.marks.resumed > 0  # pieces known, or whole turns
    last = len(tokenizer._template.render(turns[-1]))  # type: ignore[union-attr]
    assert cache.encoded_chars < last * 1.3  # about one full text, not three


def test_cache_is_bounded_in_tokens() -> None:
    import numpy as np

    cache = PieceCache(max_tokens=1000)
    for i in range(10):
        cache.put(bytes([i]), np.arange(300, dtype=np.uint32), 1200)
    assert cache.held_tokens <= 1000 and len(cache) == 3
    assert cache.get(bytes([9])) is not None and cache.get(bytes([0])) is None


def test_lazy_tokenization_stops_at_the_first_block_no_worker_holds(
    tokenizer: PromptTokenizer,
) -> None:
    rng = random.Random(3)
    text = _words(rng, 6000)
    full = identities(tokenizer.token_ids(PromptText(prompt=text)), 4)
    fresh = PromptTokenizer(tokenizer._tokenizer, None, 4)
    held = len(full) // 3

    def known(blocks: Sequence[int]) -> int:
        return min(len(blocks), held)

    lazy = fresh.blocks(PromptText(prompt=text), known=known)
    assert not lazy.exact and lazy.ticket == 0
    assert held < len(lazy.blocks) < len(full)
    assert list(lazy.blocks) == full[: len(lazy.blocks)]  # a prefix of the true blocks
    assert fresh.cache.encoded_chars < len(text) * 0.8
    assert abs(lazy.tokens - len(full) * 4) < 0.15 * len(full) * 4  # the rest estimated
    nothing = PromptTokenizer(tokenizer._tokenizer, None, 4).blocks(
        PromptText(prompt=text), known=lambda blocks: 0
    )
    assert 0 < len(nothing.blocks) < len(full) / 4  # one piece: nothing is held
    budget = PromptTokenizer(tokenizer._tokenizer, None, 4).blocks(
        PromptText(prompt=text), known=len, budget_chars=1
    )
    assert not budget.exact and list(budget.blocks) == full[: len(budget.blocks)]


def test_warm_runs_template_and_tokenizer(tokenizer: PromptTokenizer) -> None:
    tokenizer.warm()
    assert tokenizer.cache.encoded_chars > 0


def test_a_conversation_of_too_many_messages_is_not_rendered(tokenizer: PromptTokenizer) -> None:
    from kinference.tokenize.template import MAX_MESSAGES

    messages = [{"role": "user", "content": "hi"}] * (MAX_MESSAGES + 1)
    with pytest.raises(Untokenizable, match="messages"):
        tokenizer.blocks(PromptText(messages=messages))


def test_advance_says_whether_it_stopped_at_a_block_nobody_holds(
    tokenizer: PromptTokenizer,
) -> None:
    """True: nothing further can match; False: the end, the budget or the time limit (the
    rest continues where it stopped: a Pick begun on the loop, finished on the thread)."""
    rng = random.Random(4)
    text = _words(rng, 6000)
    full = identities(tokenizer.token_ids(PromptText(prompt=text)), 4)
    tokenizer = PromptTokenizer(tokenizer._tokenizer, None, 4, tokenizer.cache)  # no marks
    begun = tokenizer.start(PromptText(prompt=text))  # every piece known now
    assert not isinstance(begun, PromptBlocks)
    assert begun.advance(len, until=0.0) is False and not begun.done  # past: one step
    assert 0 < len(begun.blocks) < len(full)  # it walked part of the way (pieces known)
    assert begun.advance(len) is False and begun.done
    assert begun.result().blocks == tuple(full)
    cold = PromptTokenizer(tokenizer._tokenizer, None, 4).start(PromptText(prompt=text))
    assert not isinstance(cold, PromptBlocks)
    assert cold.advance(lambda blocks: 0) is True and not cold.done


def _spaces_bpe() -> Tokenizer:
    """GPT-2's pre-tokenizer over a BPE whose merges make `n` spaces and a newline, one
    pre-token, tokenize as the spaces then the newline unless `n % 4 == 2` (then the spaces
    end in a pair `ĠĠ` left over by the fours, which merges with the newline)."""
    vocab = {c: i for i, c in enumerate(pre_tokenizers.ByteLevel.alphabet())}
    merges = [("Ġ", "Ġ"), ("ĠĠ", "ĠĠ"), ("ĠĠ", "Ċ")]
    for left, right in merges:
        vocab[left + right] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab, merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    return tokenizer


@pytest.mark.parametrize(
    ("kind", "run"),
    [("gpt2-spaces", " "), ("nfkc-strip", " "), ("nfkc-strip", "\n"), ("nfkc-strip", " \t")],
)
def test_a_cut_after_a_whitespace_run_longer_than_its_check_is_not_trusted(
    kind: str, run: str
) -> None:
    """A cut after a newline ending a whitespace run is checked on the last `CHECK_CHARS` of
    the run only; the whole run may tokenize otherwise: GPT-2's regex keeps a run with its
    newline when cut there (one pre-token: 31 spaces and the newline tokenize as the two
    halves, 34 do not), a `Strip` normalizer drops the run at the left piece's end (its
    window's left half is stripped away whole, as is its whole window's start)."""
    raw = _spaces_bpe() if kind == "gpt2-spaces" else Tokenizer.from_str(zoo()[kind])
    tokenizer = PromptTokenizer(Tokenizer.from_str(raw.to_str()), None, 4)
    head = (" ".join(WORDS) * 3)[: FIRST_PIECES_CHARS[0] - 20]  # the run spans the first cut
    for tail in ("fox dog", " fox dog", "42 7", " 42 7"):
        text = head + (run * 40)[:34] + "\n" + tail + " " + head
        got = tokenizer.token_ids(PromptText(prompt=text)).tolist()
        assert got == raw.encode(text).ids, repr(tail)


@pytest.mark.parametrize("repeat", [1, 20_000])  # held under the GIL, and the batch call
def test_a_lone_surrogate_is_untokenizable_not_a_type_error(
    tokenizer: PromptTokenizer, repeat: int
) -> None:
    # JSON's "\ud800" decodes to a str with no UTF-8 form; the Rust tokenizer refuses it.
    text = "the quick fox " * repeat + "\ud800"
    with pytest.raises(Untokenizable, match="surrogate"):
        tokenizer.token_ids(PromptText(prompt=text))
    with pytest.raises(Untokenizable, match="surrogate"):
        tokenizer.blocks(PromptText(messages=[{"role": "user", "content": text}]))
