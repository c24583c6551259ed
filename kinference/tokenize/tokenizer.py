"""A prompt's token ids, as the engine will see them: HF `tokenizers` with the model's
tokenizer.json, chat requests rendered through the engine's chat template first.

Chat prompts are rendered text that already holds the template's special tokens, so they
are encoded without adding special tokens (as vLLM does); completion prompts are encoded
with them (vLLM's default, e.g. a BOS token), and token-id prompts are taken as they are.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from tokenizers import Encoding, Tokenizer

from kinference.kvcache.blocks import PromptBlocks, identities
from kinference.tokenize.pieces import encode_windows
from kinference.tokenize.reuse import Encoded, TurnCache
from kinference.tokenize.template import ChatTemplate, TemplateError


class Untokenizable(ValueError):
    """This prompt cannot be tokenized as the engine would (the message says why)."""


@dataclass(frozen=True, slots=True)
class PromptText:
    """What to tokenize: rendered chat messages, a completion prompt or token ids."""

    messages: list[Any] | None = None
    tools: list[Any] | None = None
    prompt: str | None = None
    token_ids: tuple[int, ...] | None = None


class PromptTokenizer:
    """One model's tokenizer, chat template and block size. Used from one thread only."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        template: ChatTemplate | None,
        block_size: int,
        cache: TurnCache | None = None,
    ) -> None:
        self._tokenizer = tokenizer
        self._template = template
        self.block_size = block_size
        self.cache = cache or TurnCache()

    @classmethod
    def from_files(
        cls, tokenizer_path: str, template_path: str | None, block_size: int
    ) -> PromptTokenizer:
        template = ChatTemplate.from_file(template_path) if template_path else None
        return cls(Tokenizer.from_file(tokenizer_path), template, block_size)

    def blocks(self, text: PromptText) -> PromptBlocks:
        started = time.perf_counter()
        ids = self.token_ids(text)
        named = identities(ids, self.block_size)
        elapsed = time.perf_counter() - started
        return PromptBlocks(len(ids), self.block_size, tuple(named), elapsed)

    def token_ids(self, text: PromptText) -> npt.NDArray[np.uint32]:
        if text.token_ids is not None:
            return np.asarray(text.token_ids, dtype=np.uint32)
        if text.messages is not None:
            if self._template is None:
                raise Untokenizable("the pool has no chat_template for chat requests")
            try:
                rendered = self._template.render(text.messages, text.tools)
            except TemplateError as exc:
                raise Untokenizable(str(exc)) from None
            return self.cache.encode(rendered, False, self._encode)[0]
        if text.prompt is not None:
            return self.cache.encode(text.prompt, True, self._encode)[0]
        raise Untokenizable("no prompt to tokenize")

    def _encode(self, text: str, special: bool) -> Encoded:
        return encode_windows(text, special, self._encode_batch)

    def _encode_batch(self, texts: Sequence[str], special: bool) -> list[Encoded]:
        # encode_batch releases the GIL while the Rust tokenizer runs; encode does not.
        encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=special)
        return [_arrays(encoding) for encoding in encodings]


def _arrays(encoding: Encoding) -> Encoded:
    ids = np.asarray(encoding.ids, dtype=np.uint32)
    starts = np.fromiter((o[0] for o in encoding.offsets), dtype=np.int64, count=len(ids))
    return ids, starts
