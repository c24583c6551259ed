"""Reading other replicas' load hashes (`Keys.load`): endpoint -> requests in flight, and
`SEQ_FIELD`, the flush sequence number the counts are as of.

A hash is read at bootstrap, after a gap in an instance's entries and by the membership
check. What none of ours writes there (a field whose name is not UTF-8 or whose value is
not an integer, a key of another type: set by hand, or by a tool sharing the prefix) is
skipped or read as no snapshot, never a failed read: failing on it, every bootstrap would
fail for as long as the key lives, the shared view never read meanwhile.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SEQ_FIELD = "~seq"  # in a load hash: the flush sequence number the counts are as of


def load_counts(raw: Mapping[bytes, bytes]) -> tuple[dict[str, int], int | None]:
    """(counts per endpoint, snapshot sequence number: None when there is none)."""
    counts, seq = {}, None
    for field, value in raw.items():
        try:
            name, number = field.decode(), int(value)
        except ValueError:  # UnicodeDecodeError too
            continue
        if name == SEQ_FIELD:
            seq = number
        else:
            counts[name] = number
    return counts, seq


def load_reply(reply: Any) -> tuple[dict[str, int], int | None]:
    """`load_counts` of one HGETALL reply of a pipeline run with `raise_on_error=False`
    (`connection.check_replies`): a key of another type has no snapshot."""
    return load_counts({} if isinstance(reply, Exception) else reply)
