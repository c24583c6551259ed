"""Cutting a prompt into pieces that tokenize exactly as the whole text does.

A tokenizer's pre-tokenizer splits text at word boundaries with a regex whose lookahead is
one character, and BPE merges never cross those splits, so a text cut where the pre-tokenizer
splits anyway tokenizes as the concatenation of its pieces' tokens. Candidate cuts are where
that holds for the regexes in use (GPT-2, Llama 3, Qwen 2, SentencePiece's Metaspace): before
a single space between two ASCII letters (` ?\\p{L}+` keeps the space with the next word) or
two ASCII digits, or after a newline followed by an ASCII letter or digit, or by a space and
one (a newline run ends there). Each candidate is checked with the model's own tokenizer
before it is used: the `CHECK_CHARS` either side of it must tokenize as the two halves do
(which also catches normalizers or prefix spaces added at a text's start), and the ones
before it must not all be whitespace (a longer run than the check sees may tokenize
otherwise); a cut that fails is not used and the piece grows to the next one. Where
the tokenizer's pre-tokenizer is known to keep a cut (`sure`: GPT-2's, Llama 3's and Qwen 2's
regexes, with no added token near it) the check's answer is known without encoding, so the
cuts are the same ones.

A piece is named by a digest of its text and the `CHECK_CHARS` around both of its cuts, so
equal names mean equal tokens wherever the piece sits in a prompt (`reuse.PieceCache`).

Chat prompts are also cut where a message ends (`ends`: right after the added token that ends
each message, the template's `eos_token`), when the cut there checks good and the piece is at
least `CHECK_CHARS` long: conversations that share their first messages (a system prompt)
share their pieces up to there, and a mark there (`turns`, `open`) lets a new conversation
resume at the shared messages' end instead of re-tokenizing the piece across it. A cut right
after an added token cuts no pre-token: the tokenizer splits its added tokens out first
(checked, or known: `sure`). Such a piece is named by its own text (no context past its end):
its cut is checked, and a piece between two good cuts tokenizes as its text alone.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

PIECE_CHARS = 1024  # a piece ends at the first checked cut this far past its start
# ... but the first ones are shorter: a prompt no worker holds is known after ~256 characters.
FIRST_PIECES_CHARS = (256, 512)
CHECK_CHARS = 32  # context either side of a cut that must tokenize the same when cut
_CANDIDATE = re.compile(r"[A-Za-z](?= [A-Za-z])|[0-9](?= [0-9])|\n(?= ?[A-Za-z0-9])")
_SEARCH_CHARS = 1024  # candidates looked at past the nominal boundary per attempt
_TRIES = 4  # candidates checked per cut before the piece grows by another PIECE_CHARS
MAX_END_CHARS = 32  # characters an `ends` token (a message's end) may take, at most

Ids = npt.NDArray[np.uint32]
BatchEncoder = Callable[[Sequence[str]], list[Ids]]  # texts -> ids, no special tokens added
Sure = Callable[[str, int], bool]  # (window, cut in it) -> known to tokenize as its halves


class CutChecks:
    """Whether the text around a cut tokenizes as its two halves, by that text: remembered,
    so that a prompt's known pieces are cut again without tokenizing anything."""

    def __init__(
        self, encode: BatchEncoder, sure: Sure | None = None, max_entries: int = 200_000
    ) -> None:
        self._encode = encode
        self._sure = sure  # (window, cut in it) -> known good without encoding (`sure`)
        self._known: OrderedDict[str, bool] = OrderedDict()
        self.max_entries = max_entries

    def first_good(self, text: str, cuts: list[int]) -> int | None:
        """The first of `cuts` where the text around it tokenizes as its two halves. The
        first is checked alone (it is nearly always good), the others together if not."""
        windows = [text[cut - CHECK_CHARS : cut + CHECK_CHARS] for cut in cuts]
        for group in (range(min(1, len(cuts))), range(1, len(cuts))):
            self._learn(text, cuts, windows, [i for i in group if windows[i] not in self._known])
            for i in group:
                if self._known.get(windows[i]):
                    self._known.move_to_end(windows[i])
                    return cuts[i]
        return None

    def _learn(self, text: str, cuts: list[int], windows: list[str], unknown: list[int]) -> None:
        """Of the `unknown` cuts, in order: a sure one is good (the ones past it are not
        needed), the ones before it are checked by encoding."""
        if self._sure is not None:
            for n, i in enumerate(unknown):
                if self._sure(windows[i], CHECK_CHARS):
                    self._remember(windows[i], True)
                    unknown = unknown[:n]
                    break
        self._check(text, cuts, windows, unknown)

    def _check(self, text: str, cuts: list[int], windows: list[str], unknown: list[int]) -> None:
        # A left half all whitespace may end a longer run, which can tokenize otherwise when
        # cut (GPT-2's `\s+(?!\S)` keeps it whole, a `Strip` normalizer drops it): not good.
        blind = {i for i in unknown if windows[i][:CHECK_CHARS].isspace()}
        for i in blind:
            self._remember(windows[i], False)
        unknown = [i for i in unknown if i not in blind]
        if not unknown:
            return
        texts = []
        for i in unknown:
            cut = cuts[i]
            texts += [windows[i], text[cut - CHECK_CHARS : cut], text[cut : cut + CHECK_CHARS]]
        encoded = self._encode(texts)
        for n, i in enumerate(unknown):
            whole, left, right = encoded[3 * n : 3 * n + 3]
            same = len(whole) == len(left) + len(right) and bool(
                np.array_equal(whole, np.concatenate((left, right)))
            )
            self._remember(windows[i], same)

    def _remember(self, window: str, same: bool) -> None:
        self._known[window] = same
        if len(self._known) > self.max_entries:
            self._known.popitem(last=False)


@dataclass(frozen=True, slots=True)
class Piece:
    start: int
    end: int
    name: bytes  # digest of the text the piece's tokens depend on
    opens: bool = False  # it ends where a message ends (see the module's docstring)


class Cutter:
    """Finds checked cuts in one text, piece after piece. Used from one thread only."""

    def __init__(
        self,
        text: str,
        kind: bytes,
        checks: CutChecks,
        whole: bool = False,
        ends: re.Pattern[str] | None = None,
    ):
        self.text = text
        self._kind = kind  # what else the tokens depend on (special tokens, the tokenizer)
        self._checks = checks
        self._whole = whole  # never cut (a tokenizer whose cuts cannot be trusted)
        self._ends = ends  # the added token(s) a message ends with (see the docstring)
        self.position = 0
        self._made = 0  # pieces cut so far

    @property
    def done(self) -> bool:
        return self.position >= len(self.text)

    @property
    def kind(self) -> bytes:
        return self._kind

    @property
    def made(self) -> int:
        return self._made

    def resume(self, position: int, made: int) -> None:
        """Go on from a checked cut of this text (`turns.Mark`), `made` pieces cut before."""
        self.position, self._made = position, made

    def can_cut_at(self, position: int) -> bool:
        """Whether `position` is a candidate cut (as `next_pieces` looks for) that checks
        good: a piece may end there (`turns`: a mark at an earlier, shorter text's end)."""
        text = self.text
        if self._whole or not CHECK_CHARS <= position <= len(text) - CHECK_CHARS:
            return False
        if _CANDIDATE.match(text, position - 1) is None and not self._opens_at(position):
            return False
        return self._checks.first_good(text, [position]) == position

    def _opens_at(self, position: int) -> bool:
        """Whether a message ends right before `position` (an `ends` token ends there)."""
        ends = self._ends
        if ends is None:
            return False
        low = max(position - MAX_END_CHARS, 0)
        return any(m.end() == position for m in ends.finditer(self.text, low, position))

    def next_pieces(self, count: int, short: bool = False) -> list[Piece]:
        """Up to `count` more pieces (fewer at the end of the text); `short`: the first of
        them as short as a text's first piece, wherever it starts."""
        pieces: list[Piece] = []
        while len(pieces) < count and self.position < len(self.text):
            begin, length = self.position, PIECE_CHARS
            if short and not pieces:
                length = FIRST_PIECES_CHARS[0]
            elif self._made < len(FIRST_PIECES_CHARS):
                length = FIRST_PIECES_CHARS[self._made]
            end, opens = self._cut_after(begin, length)
            pieces.append(Piece(begin, end, self._name(begin, end, opens), opens))
            self.position, self._made = end, self._made + 1
        return pieces

    def _cut_after(self, start: int, length: int) -> tuple[int, bool]:
        """The first checked cut at least `length` past `start`, or the end of the text;
        or, before it, the first checked cut where a message ends (`ends`: then True)."""
        text = self.text
        if self._whole:
            return len(text), False
        nominal = start + length
        cut = len(text)
        while nominal + CHECK_CHARS < len(text):
            matches = _CANDIDATE.finditer(text, nominal, nominal + _SEARCH_CHARS)
            found = [m.start() + 1 for m in itertools.islice(matches, _TRIES)]
            if found:
                good = self._checks.first_good(text, found)
                if good is not None:
                    cut = good
                    break
            nominal += PIECE_CHARS
        opens = self._message_end(start, cut)
        return (cut, False) if opens is None else (opens, True)

    def _message_end(self, start: int, cut: int) -> int | None:
        """The first good cut where a message ends, at least `CHECK_CHARS` past `start`
        (a mark there holds every earlier cut's context) and before `cut`."""
        ends, text = self._ends, self.text
        if ends is None:
            return None
        high = min(cut, len(text) - CHECK_CHARS)
        least = start + CHECK_CHARS
        found = (m.end() for m in ends.finditer(text, start, high) if m.end() >= least)
        for end in itertools.islice(found, _TRIES):
            if self._checks.first_good(text, [end]) == end:
                return end
        return None

    def _name(self, start: int, end: int, opens: bool = False) -> bytes:
        digest = hashlib.blake2b(self._kind, digest_size=16)
        low = 0 if start == 0 else start - CHECK_CHARS
        high = end if opens else len(self.text) if end >= len(self.text) else end + CHECK_CHARS
        digest.update(b"\x00start" if start == 0 else b"\x00piece")
        ending = b"\x00open" if opens else b"\x00cut"
        digest.update(b"\x00end" if end >= len(self.text) else ending)
        digest.update(self.text[low:high].encode("utf-8", "surrogatepass"))
        return digest.digest()
