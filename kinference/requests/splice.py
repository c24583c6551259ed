"""Member-level changes to a JSON object body, as splice edits on the members' spans.

`Changes` says, by key, what a rewrite does to a body's top-level members; `edits` turns it
into `(start, end, replacement)` edits on the spans the scanner found, for `Body.spliced`.
With repeated keys the last occurrence is the one that counts (as for `json.loads`): it is
the one edited, and removal or renaming removes every occurrence.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import groupby

from kinference.requests.spans import Member

Edit = tuple[int, int, bytes]  # (start, end, replacement) in body offsets


@dataclass(slots=True)
class Changes:
    """Member-level changes, by key."""

    values: dict[str, bytes] = field(default_factory=dict)  # new value of the last occurrence
    renames: dict[str, str] = field(default_factory=dict)  # new key of the last occurrence
    dropped: set[str] = field(default_factory=set)  # every occurrence removed
    repeats_dropped: set[str] = field(default_factory=set)  # all but the last removed
    added: list[tuple[str, bytes]] = field(default_factory=list)  # new members at the end

    def __bool__(self) -> bool:
        return bool(self.values or self.renames or self.dropped or self.added)

    def only_added(self) -> bool:
        """Only new members: no existing one is touched."""
        return not (self.values or self.renames or self.dropped or self.repeats_dropped)


def edits(changes: Changes, members: list[tuple[str, Member]], close_at: int) -> list[Edit]:
    last = {key: index for index, (key, _) in enumerate(members)}
    removed = [
        key in changes.dropped or (key in changes.repeats_dropped and index != last[key])
        for index, (key, _) in enumerate(members)
    ]
    edits: list[Edit] = []
    for index, (key, member) in enumerate(members):
        if removed[index] or last[key] != index:
            continue
        if key in changes.renames:
            edits.append(
                (member.key_start, member.key_end, json.dumps(changes.renames[key]).encode())
            )
        if key in changes.values:
            edits.append((member.value_start, member.value_end, changes.values[key]))
    spans = [member for _, member in members]
    edits.extend(_removals(spans, removed))
    if changes.added:
        edits.append(addition(changes.added, not all(removed), close_at))
    # Body.spliced sorts by start, stably: an insertion must come before an edit that starts
    # where it does, so order by (start, end) here.
    return sorted(edits, key=lambda edit: (edit[0], edit[1]))


def _removals(spans: list[Member], removed: list[bool]) -> Iterator[Edit]:
    """One edit per run of removed members, taking exactly one comma with it.

    A run followed by a member goes from its first key to that member's key (its commas
    included); a run at the end goes from the comma after the member before it up to the
    closing brace; a run of every member leaves `{}`.
    """
    for first, last in _runs(removed):
        if last + 1 < len(spans):
            yield spans[first].key_start, spans[last + 1].key_start, b""
        elif first > 0:
            yield spans[first - 1].value_end, spans[last].value_end, b""
        else:
            yield spans[first].key_start, spans[last].value_end, b""


def _runs(flags: list[bool]) -> Iterator[tuple[int, int]]:
    """(first, last) index of every run of True in `flags`."""
    index = 0
    for flag, group in groupby(flags):
        length = sum(1 for _ in group)
        if flag:
            yield index, index + length - 1
        index += length


def addition(added: list[tuple[str, bytes]], after_members: bool, close_at: int) -> Edit:
    """New members inserted before the closing brace."""
    text = b",".join(json.dumps(key).encode() + b":" + value for key, value in added)
    return close_at, close_at, (b"," + text) if after_members else text
