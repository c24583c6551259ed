"""Native (C) forms of the Pick's per-block loops, each with a pure-Python reference.

What is native: `_chain` (`_chain.c`), the approximate prefix index's chained block hashes
(`kinference.routing.chain.chain_tuple` is its reference: the same bits, the same
exceptions). Each extension is built by `setup.py` where a C compiler is found (`pip
install`, the image's builder stage) and is optional: without one the install still
succeeds and the pure-Python form runs, with the same results and more CPU per Pick. The
pure forms stay the reference the tests hold the native ones to (tests/native).

A caller asks for an extension through its loader here (`load_chain`), which answers None
where it was not built; the choice between native and pure is the caller's, made where it
is composed (`PrefixHasher(native=False)` forces pure), not import-time state. To see
whether it is active: `python -c "import kinference.native as n; print(n.load_chain())"`
(None: the pure form runs).
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["ChainHashes", "load_chain"]

# `_chain.hashes(data, block_bytes, count, seed, known, same)`: see its stub.
ChainHashes = Callable[
    [bytes | bytearray | memoryview, int, int, int, tuple[int, ...], int], tuple[int, ...]
]


def load_chain() -> ChainHashes | None:
    """`_chain.hashes`, or None where the extension was not built."""
    try:
        from kinference.native._chain import hashes
    except ImportError:
        return None
    return hashes
