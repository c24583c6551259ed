"""The precise pools' tokenizers, loaded from their files when a Pick or a policy load first
needs them, on the tokenizer thread (which owns them).

Validation only asks that the files exist: one may be corrupt, or gone by the time it is
loaded. Such a profile's Picks get `Unloadable` (routed approximately, DEGRADED, the reason
saying so) and the failure is logged once; the files are tried again at the next policy
load that finds them changed, or `RETRY_S` after the failure, not at every Pick nor at
every reload (discovery reloads at every pod change; a real tokenizer.json is ~10 MB of
JSON). That retry is background work of the tokenizer thread, queued by the first Pick
after `RETRY_S`: no Pick waits for it (it would have, or run it on the event loop's own
thread: `TokenizerThread.here`); Picks are routed approximately until it loads. A policy
load also loads again the files that changed since they were loaded (their size,
modification time or inode: a new model's tokenizer copied to the same path); if those do
not load, the tokenizer loaded before stays in use.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import time
from collections.abc import Callable

from kinference.tokenize.begun import Profile
from kinference.tokenize.tokenizer import PromptTokenizer, Untokenizable

log = logging.getLogger(__name__)

RETRY_S = 30.0  # a profile that failed to load is tried again after this long
_Signature = tuple[tuple[int, int, int] | None, ...]  # per file: size, mtime, inode


class Unloadable(Untokenizable):
    """The pool's tokenizer or chat template does not load (the log says why)."""


class Tokenizers:
    """Profile -> its loaded tokenizer; used from the tokenizer's one thread."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        later: Callable[[Callable[[], None]], bool] = lambda work: False,
        hold_gil: Callable[[], bool] = lambda: True,
    ) -> None:
        """`later`: queues background work on the tokenizer thread (`TokenizerThread.later`;
        False: not queued), for the retries of failed loads; `hold_gil`: the tokenizers'
        (`PromptTokenizer`)."""
        self._clock = clock
        self._later = later
        self._hold_gil = hold_gil
        self._loaded: dict[Profile, tuple[PromptTokenizer, _Signature]] = {}
        # Profile -> when it may be tried again, and its files' signature when they failed
        self._failed: dict[Profile, tuple[float, _Signature]] = {}
        self._retrying: set[Profile] = set()  # retries queued and not run yet

    def values(self) -> list[PromptTokenizer]:
        """The tokenizers loaded (tests and benchmarks)."""
        return [tokenizer for tokenizer, _ in self._loaded.values()]

    def get(self, profile: Profile) -> PromptTokenizer:
        found = self._loaded.get(profile)
        if found is not None:
            return found[0]
        failed = self._failed.get(profile)
        if failed is None:
            return self._load(profile)
        if self._clock() >= failed[0] and profile not in self._retrying:
            self._retrying.add(profile)
            if not self._later(functools.partial(self._retry, profile)):
                self._retrying.discard(profile)  # the queue is full: a later Pick asks again
        raise Unloadable(_REASON)

    def _retry(self, profile: Profile) -> None:
        """A failed profile's files tried again (background work: no Pick waits)."""
        self._retrying.discard(profile)
        if profile in self._loaded or profile not in self._failed:
            return  # a policy load did it meanwhile
        with contextlib.suppress(Unloadable):  # logged; tried again `RETRY_S` from now
            self._load(profile)

    def refresh(self, profile: Profile) -> PromptTokenizer:
        """At a policy load: the profile's tokenizer, loaded again if its files changed
        since (or failed to load: once they changed since, or `RETRY_S` after)."""
        found, signature = self._loaded.get(profile), _signature(profile)
        if found is not None and found[1] == signature:
            return found[0]
        failed = self._failed.get(profile)
        if failed is not None and failed[1] == signature and self._clock() < failed[0]:
            if found is not None:  # the files that failed are still there: it stays
                return found[0]
            raise Unloadable(_REASON)
        return self._load(profile)

    def _load(self, profile: Profile) -> PromptTokenizer:
        signature = _signature(profile)
        previous = self._loaded.get(profile)
        try:
            made = PromptTokenizer.from_files(*profile, hold_gil=self._hold_gil)
        except Exception as exc:  # tokenizers raises Exception itself; JSON, Jinja, OS errors
            kept = "; the one loaded before stays in use" if previous is not None else ""
            log.warning("tokenizer %s (template %s) does not load: %s%s", *profile[:2], exc, kept)
            self._failed[profile] = (self._clock() + RETRY_S, signature)
            if previous is not None:
                return previous[0]
            raise Unloadable(_REASON) from None
        self._loaded[profile] = (made, signature)
        self._failed.pop(profile, None)
        return made


_REASON = "the pool's tokenizer or chat template does not load (see the picker's log)"


def _signature(profile: Profile) -> _Signature:
    return tuple(_stat(path) for path in profile[:2])


def _stat(path: str | int | None) -> tuple[int, int, int] | None:
    if not isinstance(path, str):
        return None
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_size, found.st_mtime_ns, found.st_ino
