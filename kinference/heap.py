"""How the picker's process keeps its heap small and its collector short.

Two settings every serving entry point applies through `start_serving` (one place):
`kinference serve` (`App.serve`) and `kinference gateway` (`GatewayServer`, whose default
deployment hosts the picker in its own process):

- `fix_mmap_threshold`: glibc serves an allocation of at least its mmap threshold with a
  mapping of its own, returned to the system when freed. The threshold starts at 128 KiB
  but rises to the size of any such block freed (up to 32 MiB), so after the first body's
  1 MiB chunks were freed, the next ones came from the heap, whose freed space stays
  mapped: after two bursts to a 512 MiB budget, RSS stayed 467 MiB (the heap 346 MiB) with
  nothing held. A fixed threshold (setting it turns the sliding off) keeps every chunk in
  its own mapping: 153 MiB, the heap 16 MiB (docs/reliability.md).
- `freeze_startup_heap`: a full collection of the cyclic GC traverses every tracked object
  with the GIL held; over the ~90,000 objects startup builds (modules, functions, the
  policy) it stopped the loop 60-100 ms beside hostile uploads. They are never garbage,
  so they are moved out of its reach (`gc.freeze`); objects made later are collected as
  ever. It runs after startup and before the process takes requests (`start_serving`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

MMAP_THRESHOLD_BYTES = 256 * 1024  # allocations this large get a mapping of their own
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number


def fix_mmap_threshold(nbytes: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold; False where the C library is not glibc."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError, TypeError):
        log.info("not glibc: the allocator's mmap threshold is left as it is")
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, nbytes))


def freeze_startup_heap() -> None:
    """Collect once, then move every surviving object out of the collector's reach."""
    gc.collect()
    gc.freeze()


async def start_serving(start: Callable[[Callable[[], None]], Awaitable[None]]) -> None:
    """Run `start` (the process's servers, the picker among them) with the heap settled.

    The threshold is fixed before anything serves, so no body's chunk ever slides it.
    `start` is handed `freeze_startup_heap` and calls it once its startup allocations are
    done and before it takes requests or reports itself ready, so everything startup built
    is out of the collector's reach, what requests allocate later is not, and the full
    collection before the freeze (tens of milliseconds over ~95,000 objects) delays no
    request. Before, the heap was frozen once `start` returned, with the gateway already
    accepting: its first requests waited 28-74 ms for that collection (docs/gateway.md)."""
    fix_mmap_threshold()
    await start(freeze_startup_heap)
