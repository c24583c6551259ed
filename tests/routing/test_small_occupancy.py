"""`WorkerTable.small_occupancy`: the per-row helpers it replaced, in one pass, bit for bit."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from kinference.routing.readings import BATCH_HEADROOM, BatchRow, _fmax
from kinference.routing.table import WorkerTable

# -- the forms it replaced (kinference 42fff62), as they were -----------------------------


def occupancy_of_row(  # noqa: PLR0917
    table: WorkerTable, slot: int, row: BatchRow, waiting: float, prior_batch: float, peer: float
) -> tuple[float, float]:
    inflight, running = table.inflight.item(slot), table.running.item(slot)
    held = running + waiting + inflight - table.inflight_at_reading.item(slot)
    fresh = not math.isnan(held)
    sequences = max(held, 0.0) if fresh else inflight
    seen, most, limit, floor, ceiling = row
    full = seen if math.isnan(most) or math.isnan(seen) else max(seen, most)
    if not math.isnan(limit):
        return sequences, max(limit if math.isnan(full) else min(limit, full), 1.0)
    if not math.isnan(full):
        return sequences, max(full, 1.0)
    floor = _fmax(most, floor)
    guess = prior_batch if math.isnan(floor) else max(BATCH_HEADROOM * floor, prior_batch)
    if math.isnan(ceiling) and not floor > peer:
        ceiling = peer
    if not math.isnan(ceiling):
        ceiling = _fmax(ceiling, floor)
        guess = min(guess, ceiling)
    if fresh:
        took_all = running if waiting > 0 else running + 1.0
        guess = max(took_all if math.isnan(ceiling) else min(took_all, ceiling), guess)
    return sequences, max(guess, 1.0)


def peer_batch_of_rows(rows: list[BatchRow]) -> float:
    total, count = 0.0, 0
    for seen, most, _, _, ceiling in rows:
        known = _fmax(seen, ceiling)
        if not math.isnan(known):
            known = known if math.isnan(seen) else seen
            total += _fmax(known, most)
            count += 1
    return total / count if count else math.nan


def most_seen_of_rows(rows: list[BatchRow]) -> float:
    found = math.nan
    for _, most, _, floor, _ in rows:
        found = _fmax(found, _fmax(most, floor))
    return found


def unsure_of_row(row: BatchRow, peer: float, pool: float) -> float:
    seen, most, limit, floor, ceiling = row
    floor = _fmax(most, floor)
    known = _fmax(_fmax(seen, limit), ceiling)
    if not math.isnan(known) or (not math.isnan(peer) and not floor > peer):
        return math.nan
    return _fmax(floor, pool)


# -- the property ---------------------------------------------------------------------------

odd = st.sampled_from([0.0, -0.0, 1.0, 2.0, 3.0, 7.5, 8.0, 64.0, -1.0, math.inf, math.nan])
values = st.just(math.nan) | odd | st.floats(-10.0, 100.0)  # NaN: a third of them
ARRAYS = ("inflight", "running", "inflight_at_reading", "batch", "running_max")
ARRAYS += ("batch_limit", "batch_floor", "batch_ceiling")


@settings(deadline=None, max_examples=1000)
@given(
    columns=st.lists(st.lists(values, min_size=len(ARRAYS), max_size=len(ARRAYS)), max_size=9),
    waiting=st.lists(values, min_size=9, max_size=9),
    prior=st.sampled_from([1.0, 8.0, 0.5, 12.0]),
    given_peer=st.none() | values,
    given_pool=st.none() | values,
)
def test_small_occupancy_is_the_per_row_helpers(
    columns: list[list[float]],
    waiting: list[float],
    prior: float,
    given_peer: float | None,
    given_pool: float | None,
) -> None:
    table = WorkerTable()
    slots = table.slots(f"10.0.0.{i}:8000" for i in range(len(columns))).tolist()
    for slot, column in zip(slots, columns, strict=True):
        for name, value in zip(ARRAYS, column, strict=True):
            getattr(table, name)[slot] = value
    fresh = waiting[: len(slots)]
    rows = table.batch_rows(slots)
    peer = peer_batch_of_rows(rows) if given_peer is None else given_peer
    pool = most_seen_of_rows(rows) if given_pool is None else given_pool
    want = [
        occupancy_of_row(table, s, r, w, prior, peer)
        for s, r, w in zip(slots, rows, fresh, strict=True)
    ]
    want_unsure = [unsure_of_row(row, peer, pool) for row in rows]
    got = table.small_occupancy(slots, fresh, prior, peer=given_peer, pool=given_pool)
    assert repr(got) == repr(([s for s, _ in want], [b for _, b in want], want_unsure))
    assert repr(table.peer_batch_of(slots)) == repr(peer_batch_of_rows(rows))
    assert repr(table.most_seen_of(slots)) == repr(most_seen_of_rows(rows))
