"""Cuts a tokenizer's pre-tokenizer is known to keep, so that they need no check.

A cut is checked by tokenizing the text around it whole and as its two halves (`pieces`):
three encodes. For the pre-tokenizers of GPT-2 and of Llama 3 / Qwen 2 (a regex split, then
byte-level), with nothing that rewrites the text first, the answer is known beforehand for
most candidates, and is always yes:

- The model (BPE, WordPiece, Unigram, ...) tokenizes each pre-token on its own, so equal
  pre-tokens give equal tokens. With no normalizer (or a Unicode normal form, on ASCII text),
  no padding or truncation, no added token in the text around the cut and no BPE dropout, the
  three encodes see the text as it is, in one piece each.
- Before a space between two ASCII letters: every alternative of both regexes that matches a
  letter stops before a space (` ?\\p{L}+`, `[^\\r\\n\\p{L}\\p{N}]?\\p{L}+`, the contractions),
  so the pre-token holding the letter ends at the cut, and the next one starts there; the
  only character past the cut any alternative reads is the space, which fails where the end
  of the left half fails. The right half is the whole text from the cut (no lookbehind).
- Before a space between two ASCII digits: the digit alternatives (` ?\\p{N}+`,
  `\\p{N}{1,3}`, `\\p{N}`) stop at the space, the digits' groups count from where their run
  starts, the same in the whole and the left half; the space goes with the next number
  (GPT-2) or alone (`\\s+`: Llama 3's and Qwen 2's `\\s+(?!\\S)` fails before a digit), the
  same in the whole and the right half. (A mock engine's replies are token ids written as
  numbers: a next turn's new text, cut here rather than at its message's end.)
- After a newline before a space and an ASCII letter or digit: a whitespace run ending in
  that newline is one pre-token in the whole (GPT-2's `\\s+(?!\\S)` backs off the space that
  a letter or digit follows; Llama 3's `\\s*[\\r\\n]+` ends at the newline, as does the
  punctuation alternative's `[\\r\\n]*`) as at the left half's end, and the right half's
  space goes with the word or number (or alone) as in the whole. This is where a reply that
  begins with a space follows a chat turn's generation prompt.
- After a newline before an ASCII letter: Llama 3's `\\s*[\\r\\n]+` ends a whitespace run at
  its last newline, and the punctuation alternative's `[\\r\\n]*` stops at the letter as at
  the end; for GPT-2, whose `\\s+(?!\\S)` keeps a run of two or more whitespace characters
  whole at a text's end but not before a letter, only when the character before the newline
  is printable ASCII, not whitespace.

- After an added token: the tokenizer finds its added tokens first (leftmost, longest) and
  tokenizes the text between them, each run on its own. When the last added token found in
  the window ends at or before the cut (`e`), the three encodes find the same added tokens
  up to `e` and none after it, so the window tokenizes as its halves exactly when
  `window[e:]` does at the same cut, and the rules above answer for that run. Only when
  every added token is matched alike (none strips the whitespace beside it, none must be a
  single word, all normalized or none): else an added token in the window is checked, as
  before. This is the cut at the end of a chat turn's generation prompt
  (`<|im_start|>assistant\n` before the reply), which a next turn resumes at.
- Right after an added token (a message's end, `pieces`' `ends`), under the same condition:
  the whole text's scan for added tokens finds one ending at the cut and goes on from there
  as the right half's does from its start, and the left half's scan finds the same ones as
  the whole's before the cut (none of those crosses it), so no run is cut. An added token
  that crosses the cut instead (a longer one read first) is not sure.

Anything else is checked by encoding as before, so the cuts are the same ones.
"""

from __future__ import annotations

import json
import re
import string
from typing import Any

from tokenizers import Tokenizer

_LLAMA3_TAIL = r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_LLAMA3_HEAD = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+"
SPLITS = (  # Llama 3's, Qwen 2's (digits one at a time)
    _LLAMA3_HEAD + r"|\p{N}{1,3}" + _LLAMA3_TAIL,
    _LLAMA3_HEAD + r"|\p{N}" + _LLAMA3_TAIL,
)
_NORMAL_FORMS = {"NFC", "NFD", "NFKC", "NFKD"}  # none of them changes ASCII text
_LETTERS = frozenset(string.ascii_letters)
_DIGITS = frozenset(string.digits)
_ALNUM = _LETTERS | _DIGITS
_PRINTABLE = frozenset(chr(c) for c in range(0x21, 0x7F))  # ASCII, not whitespace


class SureCuts:
    """Says of a candidate cut that it tokenizes as its two halves, when that is known
    without encoding (see the module docstring); a cut it is not sure of is checked."""

    def __init__(
        self, added: list[str], newline_any: bool, ascii_only: bool, runs: bool = False
    ) -> None:
        # Longest first: `re` takes the first alternative that matches, so a search finds
        # the leftmost added token and, there, the longest (as the tokenizer does).
        contents = sorted(set(added), key=len, reverse=True)
        self._added = re.compile("|".join(map(re.escape, contents))) if contents else None
        self._newline_any = newline_any  # a newline cut needs no printable character before
        self._ascii_only = ascii_only  # the normalizer leaves only ASCII text as it is
        self._runs = runs  # added tokens are matched alike: the run after the last one decides

    @classmethod
    def of(cls, tokenizer: Tokenizer) -> SureCuts | None:
        """For this tokenizer, or None if none of its cuts is known without encoding."""
        if tokenizer.padding is not None or tokenizer.truncation is not None:
            return None
        if getattr(tokenizer.model, "dropout", None) is not None:
            return None
        normal = _state(tokenizer.normalizer)
        if normal is not None and normal.get("type") not in _NORMAL_FORMS:
            return None
        pre = _state(tokenizer.pre_tokenizer)
        if _byte_level(pre, use_regex=True):
            newline_any = False  # GPT-2's regex
        elif _split_then_bytes(pre):
            newline_any = True
        else:
            return None
        tokens = list(tokenizer.get_added_tokens_decoder().values())
        runs = not any(t.lstrip or t.rstrip or t.single_word for t in tokens) and (
            len({t.normalized for t in tokens}) <= 1
        )
        added = [token.content for token in tokens]
        return cls(added, newline_any, ascii_only=normal is not None, runs=runs)

    def sure(self, window: str, at: int) -> bool:
        """Whether `window`, cut at `at`, is known to tokenize as its two halves."""
        if self._ascii_only and not window.isascii():
            return False
        added = self._added
        if added is not None and added.search(window) is not None:
            if not self._runs:
                return False
            end = 0
            for found in added.finditer(window):
                if found.end() == at:  # right after an added token: no run is cut
                    return True
                if found.end() > at:  # an added token across the cut, or after it
                    return False
                end = found.end()
            window, at = window[end:], at - end  # the run after the last added token
        return self._plain(window, at)

    def _plain(self, window: str, at: int) -> bool:
        """`sure` of a window with no added token in it."""
        if at < 2 or at + 1 >= len(window):
            return False
        left, right = window[at - 1], window[at + 1]
        if window[at] == " ":  # between two letters or two digits, or after a newline
            good = (left in _LETTERS and right in _LETTERS) or (
                left in _DIGITS and right in _DIGITS
            )
            good = good or (left == "\n" and right in _ALNUM)
        elif window[at - 1] == "\n":
            good = window[at] in _LETTERS and (self._newline_any or window[at - 2] in _PRINTABLE)
        else:
            return False
        return good


def _state(part: Any) -> dict[str, Any] | None:
    if part is None:
        return None
    state: dict[str, Any] = json.loads(part.__getstate__())
    return state


def _byte_level(state: dict[str, Any] | None, use_regex: bool) -> bool:
    return (
        state is not None
        and state.get("type") == "ByteLevel"
        and state.get("add_prefix_space") is False
        and state.get("use_regex") is use_regex
    )


def _split_then_bytes(state: dict[str, Any] | None) -> bool:
    parts = state.get("pretokenizers") if state and state.get("type") == "Sequence" else None
    if not parts or len(parts) != 2:
        return False
    split, bytes_ = parts
    return (
        split.get("type") == "Split"
        and (split.get("pattern") or {}).get("Regex") in SPLITS
        and split.get("behavior") == "Isolated"
        and split.get("invert") is False
        and _byte_level(bytes_, use_regex=False)
    )
