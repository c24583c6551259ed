"""One Pick's prompt while it is tokenized: begun on the event loop (`TokenizerThread.here`)
and, if the loop's share ran out, finished on the tokenizer thread (`prepare`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from kinference.kvcache.blocks import PromptBlocks
from kinference.tokenize.lazy import Known, Tokenization

Profile = tuple[str, str | None, int]  # tokenizer path, chat template path, block size


@dataclass(slots=True)
class Started:
    """One Pick's prompt per profile, as far as it is tokenized: begun on the loop
    (`TokenizerThread.here`), finished on the thread if the loop's share ran out."""

    refs: dict[Profile, list[str]] = field(default_factory=dict)
    work: dict[Profile, Tokenization | PromptBlocks] = field(default_factory=dict)
    known: dict[Profile, Known | None] = field(default_factory=dict)
    open: set[Profile] = field(default_factory=set)  # not at their stop yet
    seconds: float = 0.0  # spent on it so far, wherever

    def add(
        self,
        profile: Profile,
        refs: list[str],
        work: Tokenization | PromptBlocks,
        known: Known | None,
    ) -> None:
        self.refs[profile], self.work[profile], self.known[profile] = refs, work, known
        if isinstance(work, Tokenization):
            self.open.add(profile)


Outcome = dict[Profile, PromptBlocks] | Started | str | None
