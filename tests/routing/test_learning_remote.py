"""Other replicas' prefills in progress (`Learning.remote_prefilling`), keyed by the
replica and its pick's id: an id comes again (CPython reuses a freed object's id at once)
while the end of the prefill it named was lost (an entry trimmed before it was read, or
dropped at the outbox's bound while Redis refused writes)."""

from __future__ import annotations

from kinference.routing.journal import NullJournal
from kinference.routing.learning import REMOTE_PREFILL_TTL_S, Learning
from kinference.routing.pending import PendingPrefix
from kinference.routing.prefix import PrefixIndex
from kinference.routing.table import WorkerTable

DOC = PendingPrefix(tuple(range(100, 140)), 0, 640.0, 16.0)


def test_a_pick_id_named_again_ends_the_prefill_whose_end_was_lost() -> None:
    """Before, the first prefill stayed pending on worker 0 for good: its TTL tracked only
    the latest worker under that key, and worker 0's slot was never idle (never freed)."""
    learn = Learning(WorkerTable(), PrefixIndex(10_000), NullJournal())
    table = learn.table
    table.slots(f"10.0.0.{i}:8000" for i in range(2))
    learn.remote_prefilling("r1", 0, 7, DOC, now=0.0)  # its PREFILLED never comes
    learn.remote_prefilling("r1", 1, 7, DOC, now=1.0)  # the id again, another pick
    assert table.pending_prefill.tolist()[:2] == [0.0, 640.0]
    learn.remote_prefilled("r1", 1, 7)
    learn.remote_prefilling("r2", 1, 8, DOC, now=2.0 + REMOTE_PREFILL_TTL_S)
    assert table.pending_prefill.tolist()[:2] == [0.0, 640.0]
    assert table.idle(0)


def test_a_pick_id_named_again_on_the_same_worker_counts_its_tokens_once() -> None:
    learn = Learning(WorkerTable(), PrefixIndex(10_000), NullJournal())
    table = learn.table
    table.slots(f"10.0.0.{i}:8000" for i in range(2))
    learn.remote_prefilling("r1", 0, 5, DOC, now=0.0)  # another pick, still in progress
    learn.remote_prefilling("r1", 0, 7, DOC, now=0.0)  # its PREFILLED never comes
    learn.remote_prefilling("r1", 0, 7, DOC, now=1.0)
    assert table.pending_prefill[0] == 1280.0  # 5's and 7's, once each (1920 before)
