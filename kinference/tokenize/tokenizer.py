"""A prompt's token ids, as the engine will see them: HF `tokenizers` with the model's
tokenizer.json, chat requests rendered through the engine's chat template first.

Chat prompts are rendered text that already holds the template's special tokens, so they
are encoded without adding special tokens (as vLLM does); completion prompts are encoded
with them (vLLM's default, e.g. a BOS token), and token-id prompts are taken as they are.
Text is tokenized in checked pieces (`pieces`), each piece once (`reuse.PieceCache`), and
only as far as a Pick needs (`lazy`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

from kinference.kvcache.blocks import PromptBlocks, identities
from kinference.tokenize.lazy import Known, Tokenization
from kinference.tokenize.pieces import MAX_END_CHARS, CutChecks, Cutter, Ids, Piece
from kinference.tokenize.reuse import PieceCache
from kinference.tokenize.sure import SureCuts
from kinference.tokenize.template import ChatTemplate, TemplateError
from kinference.tokenize.turns import PrefixDigest, TurnMarks

_SAMPLE = "The quick brown fox jumps over the lazy dog.\nIt was 12:30, and nobody's there."
_HOLD_GIL_CHARS = 1536  # texts this short are encoded holding the GIL (see _encode)
_LEARN = 0.05  # weight of each tokenized piece in the characters-per-token average


class Untokenizable(ValueError):
    """This prompt cannot be tokenized as the engine would (the message says why)."""


@dataclass(frozen=True, slots=True)
class PromptText:
    """What to tokenize: rendered chat messages, a completion prompt or token ids."""

    messages: list[Any] | None = None
    tools: list[Any] | None = None
    prompt: str | None = None
    token_ids: tuple[int, ...] | None = None


def _always() -> bool:
    return True


class PromptTokenizer:
    """One model's tokenizer, chat template and block size. Used from one thread at a time.

    `hold_gil`: whether short texts are encoded holding the GIL on the calling thread now
    (see `_encoded`; by default always)."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        template: ChatTemplate | None,
        block_size: int,
        cache: PieceCache | None = None,
        *,
        hold_gil: Callable[[], bool] = _always,
    ) -> None:
        self._tokenizer = tokenizer
        self._hold_gil = hold_gil
        self._template = template
        self.block_size = block_size
        self.cache = cache or PieceCache()
        self.marks = TurnMarks()  # where finished prompts' next turns may resume
        sure = SureCuts.of(tokenizer)  # cuts known good without encoding, if any
        self._checks = CutChecks(self._plain, sure.sure if sure else None)
        self._ends = _message_ends(tokenizer, template)  # chat prompts cut at message ends
        sample = tokenizer.encode_batch([_SAMPLE, _SAMPLE], add_special_tokens=False)[0].ids
        special = tokenizer.encode(_SAMPLE, add_special_tokens=True).ids
        # Completion prompts are cut too if special tokens only lead (BOS), never trail.
        self._cut_special = special[len(special) - len(sample) :] == sample
        self.chars_per_token = len(_SAMPLE) / max(len(sample), 1)  # learned from each piece

    @classmethod
    def from_files(
        cls,
        tokenizer_path: str,
        template_path: str | None,
        block_size: int,
        *,
        hold_gil: Callable[[], bool] = _always,
    ) -> PromptTokenizer:
        template = ChatTemplate.from_file(template_path) if template_path else None
        return cls(Tokenizer.from_file(tokenizer_path), template, block_size, hold_gil=hold_gil)

    def warm(self) -> None:
        """Run every step once, so that the first Pick does not pay for first calls."""
        if self._template is not None:  # a chat prompt's path: render, cut, mark
            self.blocks(PromptText(messages=[{"role": "user", "content": _SAMPLE * 64}]))
        self.blocks(PromptText(prompt=_SAMPLE * 64))

    def start(self, text: PromptText) -> Tokenization | PromptBlocks:
        """A tokenization to advance, or the blocks of a token-id prompt."""
        if text.token_ids is not None:
            ids = np.asarray(text.token_ids, dtype=np.uint32)
            named = identities(ids, self.block_size)
            return PromptBlocks(len(ids), self.block_size, tuple(named))
        if text.messages is not None:
            if self._template is None:
                raise Untokenizable("the pool has no chat_template for chat requests")
            try:
                rendered = self._template.render(text.messages, text.tools)
            except TemplateError as exc:
                raise Untokenizable(str(exc)) from None
            return self._tokenization(rendered, special=False)
        if text.prompt is not None:
            return self._tokenization(text.prompt, special=True)
        raise Untokenizable("no prompt to tokenize")

    def blocks(
        self, text: PromptText, known: Known | None = None, budget_chars: int | None = None
    ) -> PromptBlocks:
        """The prompt's blocks: all of them, or (`known`) as far as some worker may hold."""
        started = time.perf_counter()
        begun = self.start(text)
        if isinstance(begun, PromptBlocks):
            return begun
        begun.advance(known, budget_chars)
        begun.seconds = time.perf_counter() - started
        return begun.result()

    def token_ids(self, text: PromptText) -> npt.NDArray[np.uint32]:
        """Every token of the prompt (tests and benchmarks; Picks need only blocks)."""
        begun = self.start(text)
        if isinstance(begun, PromptBlocks):
            return np.asarray(text.token_ids, dtype=np.uint32)
        begun.advance()
        return begun.ids()

    def _tokenization(self, text: str, special: bool) -> Tokenization:
        whole = special and not self._cut_special
        ends = None if special else self._ends
        cutter = Cutter(text, b"special" if special else b"plain", self._checks, whole, ends)
        if whole:
            return Tokenization(cutter, self, self.block_size, special)
        prefix = PrefixDigest(cutter.kind, text)  # `find` leaves it at the mark it found
        work = Tokenization(cutter, self, self.block_size, special, self.marks, prefix=prefix)
        mark = self.marks.find(cutter.kind, text, prefix, cutter.can_cut_at)
        if mark is not None:  # a conversation's next turn: its history is tokenized
            work.resume(mark, short=True)
        return work

    def tokens(self, text: str, pieces: list[Piece], special: bool) -> tuple[list[Ids], int]:
        """Each piece's ids (from the cache or tokenized in one batch) and the characters
        tokenized; `special`: the first piece gets the tokenizer's special tokens."""
        found = [self.cache.get(piece.name) for piece in pieces]
        missing = [i for i, ids in enumerate(found) if ids is None]
        lead = [i for i in missing if special and i == 0]
        rest = [i for i in missing if not (special and i == 0)]
        chars = 0
        for group, with_special in ((lead, True), (rest, False)):
            if not group:
                continue
            texts = [text[pieces[i].start : pieces[i].end] for i in group]
            encoded = self._encode(texts, with_special)
            for i, piece_text, ids in zip(group, texts, encoded, strict=True):
                self.cache.put(pieces[i].name, ids, len(piece_text))
                found[i] = ids
                chars += len(piece_text)
                if len(ids):
                    ratio = len(piece_text) / len(ids)
                    self.chars_per_token += _LEARN * (ratio - self.chars_per_token)
        return [ids for ids in found if ids is not None], chars

    def _plain(self, texts: Sequence[str]) -> list[Ids]:
        return self._encode(texts, False)

    def _encode(self, texts: Sequence[str], special: bool) -> list[Ids]:
        try:
            return self._encoded(texts, special)
        except TypeError:
            # JSON may carry a lone surrogate (`"\\ud800"`): a str with no UTF-8 form, which
            # the Rust tokenizer refuses as not a str. A client's text, not a bug to log.
            if any(_lone_surrogate(text) for text in texts):
                raise Untokenizable("the prompt holds a lone surrogate (no UTF-8 form)") from None
            raise

    def _encoded(self, texts: Sequence[str], special: bool) -> list[Ids]:
        if sum(map(len, texts)) <= _HOLD_GIL_CHARS and self._hold_gil():
            # ~1 ms at most: releasing the GIL would cost more, as getting it back means
            # waiting for a busy event loop's switch interval (5 ms). Not on the event loop's
            # own thread (`hold_gil`: a Pick's first steps, `TokenizerThread.here`), where
            # no other thread waits for it meanwhile: there the batch call below, which
            # computes no offsets, costs ~1/3 less (a 256-character piece: ~190 against
            # ~300 µs of CPU between Picks; docs/benchmarks.md, h204). The same ids.
            encode = self._tokenizer.encode
            return [np.asarray(encode(t, add_special_tokens=special).ids, np.uint32) for t in texts]
        # The batch calls release the GIL while the Rust tokenizer runs; the fast one
        # computes no offsets, which pieces do not need.
        encodings = self._tokenizer.encode_batch_fast(list(texts), add_special_tokens=special)
        return [np.asarray(encoding.ids, dtype=np.uint32) for encoding in encodings]


def _lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _message_ends(tokenizer: Tokenizer, template: ChatTemplate | None) -> re.Pattern[str] | None:
    """The added token a chat template ends each message with (its `eos_token`: ChatML's
    `<|im_end|>`, Llama 3's `<|eot_id|>`), if it is one of the tokenizer's added tokens."""
    eos = template.special.get("eos_token") if template is not None else None
    added = {token.content for token in tokenizer.get_added_tokens_decoder().values()}
    if not eos or eos not in added or len(eos) > MAX_END_CHARS:
        return None
    return re.compile(re.escape(eos))
