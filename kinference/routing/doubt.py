"""The unknown batch's doubt and the pool's probe: what joining a worker past the most
sequences it was seen running may cost while its batch is not known (`unseen_wait`), and the
one join past that most the pool lets go unpriced to learn it (`is_probe`, `probe_limit`,
`needed_probes`). Read by the TTFT scorer's forms (`scorers.ttft`, `scorers.ttft_small`;
the C twin in `native/ttft_rows.c` and `_ttft.c` keeps these constants in `native/ttft.h`).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

_FloatArray = npt.NDArray[np.float64]

# An expected wait beyond the most seen running (`unseen_wait`) needs this many seen at
# once: an engine seen running one at a time says no more of its batch than an idle one.
MOST_SEEN_FOR_DOUBT = 2.0
# Batch sizes `unseen_wait` weighs at most (most, most + 1, ...): no engine batches more,
# and readings an engine reports are not bounded (1e20 running would loop for ever).
MAX_DOUBT_STEPS = 4096


def unseen_wait(joined: float, most: float, batch: float, service_ms: float) -> float:
    """The expected wait of the `joined`-th sequence on a worker seen running `most` at
    most, whose batch is guessed `batch`: the batch taken as any of `most`..`batch`,
    equally likely, each sequence beyond a batch b waiting `service_ms / b` (0 when `most`
    is NaN: the batch is known, or nothing was seen; or below `MOST_SEEN_FOR_DOUBT`); the
    first `MAX_DOUBT_STEPS` batch sizes only."""
    if not most >= MOST_SEEN_FOR_DOUBT or joined <= most:
        return 0.0
    total, size = 0.0, batch - most + 1.0
    candidate = most
    for _ in range(MAX_DOUBT_STEPS):
        if not (candidate < joined and candidate <= batch):
            break
        total += (joined - candidate) / candidate
        candidate += 1.0
    return service_ms * total / max(size, 1.0)


def probe_limit(probing: _FloatArray, late: _FloatArray, slots: list[int]) -> float:
    """The sequences from which no candidate may probe (`is_probe`): 0 while one of the
    slots has a probe in flight (`WorkerTable.probing`), else the fewest a probe joined
    that came late (`WorkerTable.probe_late`), inf when none did. The slots are the pool's
    ready workers (`PickContext.pool_slots`), not only the candidates the filters kept:
    the saturation filter leaving out the worker whose probe came late let the pool probe
    as far again (a 5th queued 1,381 ms on a 4-slot engine, h148)."""
    limit = math.inf
    for slot in slots:
        if probing.item(slot) > 0.0:
            return 0.0
        if (fewest := late.item(slot)) < limit:  # (NaN: none came late there)
            limit = fewest
    return limit


def is_probe(joined: float, most: float, limit: float) -> bool:
    """Whether the `joined`-th sequence on a worker seen running `most` at most (`unsure`)
    is the pool's probe: one past the most, below `limit` (`probe_limit`: none in flight,
    none as far came late). Its wait is priced as none: its first token on time raises
    the floor (h81), and until then no other joins past the most without the doubt.
    Doubting every such join kept the pool's most where it was (64-slot engines running
    2-5 charged 67-143 ms, hits sent cold, h107/h118); a late one ends the probing there,
    so a 4-slot pool queues one pick to it, and the doubt prices the rest as before."""
    return most >= MOST_SEEN_FOR_DOUBT and most < joined <= most + 1.0 and joined < limit


# A probe pays no doubt only where it saves at least this much of the request's own
# prefill against every candidate that takes it without doubt or queue: a hit against a
# cold send, not one of two hits (h121: free, a 5th on 4 slots tied with a holder with a
# free slot and queued there, mixed 6's p90 180 -> 262 ms).
PROBE_SAVING_MS = 20.0


def needed_probes(
    probes: list[float], prefill: list[float], slot_wait: list[float], unsure: list[float]
) -> None:
    """Keep, of the candidates flagged in `probes` (1.0), those whose own prefill
    (`prefill`, ms) is smaller by `PROBE_SAVING_MS` than that of every candidate with a
    known free slot (no probe, no slot wait, no doubt in `unsure`); the others are no
    probes (set 0.0) and keep their doubt. A kept probe's doubt is set to 0. In place."""
    safest = math.inf
    for i, probe in enumerate(probes):
        if probe == 0.0 and slot_wait[i] == 0.0 and unsure[i] == 0.0:
            safest = min(safest, prefill[i])
    for i, probe in enumerate(probes):
        if probe == 0.0:
            continue
        if prefill[i] + PROBE_SAVING_MS <= safest:
            unsure[i] = 0.0
        else:
            probes[i] = 0.0


def unseen_waits(
    joined: _FloatArray, most: _FloatArray, batch: _FloatArray, service_ms: _FloatArray
) -> _FloatArray:
    """`unseen_wait` per candidate."""
    known = ~(most >= MOST_SEEN_FOR_DOUBT) | (joined <= most)
    if known.all():
        return np.zeros(len(joined))
    return np.array([
        unseen_wait(j, m, b, s)
        for j, m, b, s in zip(joined.tolist(), most.tolist(), batch.tolist(),
                              service_ms.tolist(), strict=True)
    ])  # fmt: skip
