"""How the picker's process keeps its heap small and its collector short.

Three settings every serving entry point applies through `start_serving` (one place):
`kinference serve` (`App.serve`) and `kinference gateway` (`GatewayServer`, whose default
deployment hosts the picker in its own process):

- `fix_mmap_threshold`: glibc serves an allocation of at least its mmap threshold with a
  mapping of its own, returned to the system when freed. The threshold starts at 128 KiB
  but rises to the size of any such block freed (up to 32 MiB), so after the first body's
  1 MiB chunks were freed, the next ones came from the heap, whose freed space stays
  mapped: after two bursts to a 512 MiB budget, RSS stayed 467 MiB (the heap 346 MiB) with
  nothing held. A fixed threshold (setting it turns the sliding off) keeps every chunk in
  its own mapping: 153 MiB, the heap 16 MiB (docs/reliability.md).
- `cache_large_blocks`: with the threshold fixed, each object of 256 KiB or more is a
  fresh mapping the kernel fills page by page on first write (~256 faults a MiB: a 1 MiB
  `bytes` made ~0.7 ms, against ~0.1 ms with its pages already there). gRPC aio joins every
  received message into one `bytes` on the event loop, so 16 pushes of 1 MiB chunks
  arriving together held the loop ~10 ms in page faults (docs/benchmarks.md, h109). The
  raw allocator is wrapped (`native/_blocks.c`) so that freed blocks of 256 KiB-4 MiB are
  kept, their pages filled, up to `KEPT_BLOCKS_BYTES` together, and reused by the next
  request of their 64 KiB class; past the cap they go back to the system as before, so
  RSS after a burst is at most that much higher, and only for a while: while the process
  serves (`idle_blocks_returned`, around `kinference serve`'s and `kinference gateway`'s
  run), the blocks kept `KEPT_BLOCK_IDLE_S` without being taken back are unmapped
  (`kinference_heap_kept_bytes` shows what is kept). Where the extension was not built,
  nothing changes.
- `freeze_startup_heap`: a full collection of the cyclic GC traverses every tracked object
  with the GIL held; over the ~90,000 objects startup builds (modules, functions, the
  policy) it stopped the loop 60-100 ms beside hostile uploads. They are never garbage,
  so they are moved out of its reach (`gc.freeze`); objects made later are collected as
  ever. It runs after startup and before the process takes requests (`start_serving`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import gc
import logging
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable

from kinference import native
from kinference.tasks import cancel_and_wait

log = logging.getLogger(__name__)

MMAP_THRESHOLD_BYTES = 256 * 1024  # allocations this large get a mapping of their own
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
# Freed large blocks kept for reuse (`cache_large_blocks`): sizes served, and the cap.
KEPT_BLOCK_MIN_BYTES = MMAP_THRESHOLD_BYTES
KEPT_BLOCK_MAX_BYTES = 4 << 20  # a 1 MiB prompt's text as UCS-4, a chunk's message
KEPT_BLOCKS_BYTES = 32 << 20
# Seconds a kept block waits to be taken back before it is unmapped: bursts seconds apart
# keep reusing their pages, and a quiet replica's RSS falls back within a minute.
KEPT_BLOCK_IDLE_S = 30.0
RETURN_PERIOD_S = 1.0  # seconds between two looks for idle kept blocks


def fix_mmap_threshold(nbytes: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold; False where the C library is not glibc."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError, TypeError):
        log.info("not glibc: the allocator's mmap threshold is left as it is")
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, nbytes))


def cache_large_blocks() -> bool:
    """Keep freed large blocks for reuse (see the module's docstring); False where the
    extension is not built, it is already installed, or tracemalloc traces: stopping it
    would put back the allocator it found, and our blocks would reach that one's free."""
    blocks = native.load_blocks()
    if blocks is None or tracemalloc.is_tracing():
        return False
    return blocks.install(KEPT_BLOCK_MIN_BYTES, KEPT_BLOCK_MAX_BYTES, KEPT_BLOCKS_BYTES)


def return_idle_blocks(idle_s: float = KEPT_BLOCK_IDLE_S) -> int:
    """Unmap the large blocks kept `idle_s` seconds or more without reuse; the bytes given
    back (0 where the cache is not built or not installed). Cheap: a walk of at most
    `KEPT_BLOCKS_BYTES` / 256 KiB kept blocks under the cache's lock."""
    blocks = native.load_blocks()
    return 0 if blocks is None else blocks.release(idle_s)


@contextlib.asynccontextmanager
async def idle_blocks_returned(
    period_s: float = RETURN_PERIOD_S, idle_s: float = KEPT_BLOCK_IDLE_S
) -> AsyncIterator[None]:
    """While inside, look every `period_s` seconds for blocks kept `idle_s` seconds without
    reuse and unmap them."""
    returning = _return_forever(period_s, idle_s)
    task = asyncio.create_task(returning, name="kinference-idle-blocks")
    try:
        yield
    finally:
        await cancel_and_wait(task)


async def _return_forever(period_s: float, idle_s: float) -> None:
    while True:
        await asyncio.sleep(period_s)
        return_idle_blocks(idle_s)


def kept_block_bytes() -> int:
    """What the large blocks' cache keeps mapped now, for reuse (0 where not built)."""
    blocks = native.load_blocks()
    return 0 if blocks is None else blocks.stats()["kept_bytes"]


def freeze_startup_heap() -> None:
    """Collect once, then move every surviving object out of the collector's reach."""
    gc.collect()
    gc.freeze()


async def start_serving(start: Callable[[Callable[[], None]], Awaitable[None]]) -> None:
    """Run `start` (the process's servers, the picker among them) with the heap settled.

    The threshold is fixed and the large blocks' cache installed before anything serves,
    so no body's chunk ever slides it.
    `start` is handed `freeze_startup_heap` and calls it once its startup allocations are
    done and before it takes requests or reports itself ready, so everything startup built
    is out of the collector's reach, what requests allocate later is not, and the full
    collection before the freeze (tens of milliseconds over ~95,000 objects) delays no
    request. Before, the heap was frozen once `start` returned, with the gateway already
    accepting: its first requests waited 28-74 ms for that collection (docs/gateway.md)."""
    fix_mmap_threshold()
    cache_large_blocks()
    await start(freeze_startup_heap)
