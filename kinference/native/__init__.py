"""Native (C) forms of per-block loops, each with a pure-Python reference.

What is native: `_chain` (`_chain.c`): the approximate prefix index's chained block hashes
(`kinference.routing.chain.chain_tuple` is its reference: the same bits, the same
exceptions) and the precise mode's block identities from token ids
(`kinference.kvcache.blocks.identities`, for uint32 arrays); `_prefix` (`_prefix.c`): the
approximate prefix index's per-block store, which slots hold which block hashes in LRU order
(`kinference.routing.prefix_store.PyPrefixStore` is its reference); `_ttft` (`_ttft.c`,
`ttft_args.c`, `ttft_rows.c`): the TTFT scorer's terms and scores for a few candidates
(`kinference.routing.scorers.ttft_small` is its reference: the same bits, the same
exceptions), and a Pick's per-slot engine signals (`ttft_signals.c`, `load_signals`;
`EngineReadings.engine_signals` and `.queue_now` are its reference), and a small pool's
terms, scores and choice in one call when the TTFT scorer is the only one answering
(`load_choose`; `Pipeline.choose`'s general path is its reference); `_scan` (`_scan.c`):
the body scan's run over strings and brackets below the top level
(`kinference.requests.scan_run.pure_run` is its reference: the same members, counts and
failures), and the strict parse's pre-count of brackets and colons (`limit_counts`;
`kinference.requests.fields.pure_limit_counts` is its reference); `_blocks` (`_blocks.c`):
a bounded cache of large blocks under Python's raw allocator (`kinference.heap`; no pure
twin: without it each large object is a fresh mapping, as glibc makes it). Each extension
is built by `setup.py` where a C compiler is found (`pip install`, the image's builder stage) and is
optional: without one the install still succeeds and the pure-Python forms run, with the
same results and more CPU per Pick. The pure forms stay the reference the tests hold the
native ones to (tests/native).

A caller asks for an extension through its loader here (`load_chain`, `load_ttft`), which
answers None where it was not built (the import is tried once: a failed import costs tens of
µs); the choice between native and pure is the caller's, made where it is composed
(`PrefixHasher(native=False)`, `identities(..., native=False)`, `PrefixIndex(bound,
store=PyPrefixStore())`, `TtftScorer(config, rates, native=False)`, `signals_now(...,
native=False)`, `JsonScanner(native=False)` force pure; `prefix_store.new_store` chooses the
store), not import-time state. To see whether it is active: `python -c "import
kinference.native as n; print(n.load_chain(), n.load_ttft(), n.load_scan())"` (None: the
pure forms run).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

__all__ = [
    "Blocks",
    "Chain",
    "ScanRun",
    "load_blocks",
    "load_chain",
    "load_choose",
    "load_limit_counts",
    "load_scan",
    "load_signals",
    "load_ttft",
]

Buffer = bytes | bytearray | memoryview
# `_scan.run`: (data, pos, window, stack, max_depth, long_string_bytes) ->
# (after, strings, string_bytes, brackets)
ScanRun = Callable[[Buffer, int, int, bytearray, int, int], tuple[int, int, int, int]]


class Chain(NamedTuple):
    """The functions of `_chain` (see its stub, `_chain.pyi`)."""

    hashes: Callable[[Buffer, int, int, int, tuple[int, ...], int], tuple[int, ...]]
    identities: Callable[[Buffer, int, int], list[int]]


class Blocks(NamedTuple):
    """The functions of `_blocks` (see its stub, `_blocks.pyi`)."""

    install: Callable[[int, int, int], bool]
    release: Callable[[float], int]
    stats: Callable[[], dict[str, int]]


@functools.cache
def load_blocks() -> Blocks | None:
    """`_blocks`'s functions, or None where the extension was not built."""
    try:
        from kinference.native import _blocks
    except ImportError:
        return None
    return Blocks(_blocks.install, _blocks.release, _blocks.stats)


@functools.cache
def load_chain() -> Chain | None:
    """`_chain`'s functions, or None where the extension was not built."""
    try:
        from kinference.native import _chain
    except ImportError:
        return None
    return Chain(_chain.hashes, _chain.identities)


@functools.cache
def load_ttft() -> Callable[..., object] | None:
    """`_ttft.terms` (see its stub, `_ttft.pyi`), or None where it was not built."""
    try:
        from kinference.native import _ttft
    except ImportError:
        return None
    return _ttft.terms


@functools.cache
def load_choose() -> Callable[..., object] | None:
    """`_ttft.choose` (see its stub): a small pool's TTFT terms, scores and choice in one
    call; None where it was not built."""
    try:
        from kinference.native import _ttft
    except ImportError:
        return None
    return _ttft.choose


@functools.cache
def load_signals() -> Callable[..., object] | None:
    """`_ttft.signals` (see its stub), or None where it was not built."""
    try:
        from kinference.native import _ttft
    except ImportError:
        return None
    return _ttft.signals


@functools.cache
def load_scan() -> ScanRun | None:
    """`_scan.run` (see its stub, `_scan.pyi`), or None where it was not built."""
    try:
        from kinference.native import _scan
    except ImportError:
        return None
    return _scan.run


@functools.cache
def load_limit_counts() -> Callable[[Buffer], tuple[int, int]] | None:
    """`_scan.limit_counts` (see its stub), or None where it was not built."""
    try:
        from kinference.native import _scan
    except ImportError:
        return None
    return _scan.limit_counts
