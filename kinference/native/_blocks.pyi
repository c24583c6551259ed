def install(min_bytes: int, max_bytes: int, cap_bytes: int, /) -> bool:
    """Wrap Python's raw allocator (once per process; False when it already is): requests
    of [min_bytes, max_bytes] get mappings of their own in 64 KiB classes, and freed ones are
    kept for reuse (pages already filled) while the kept ones total at most `cap_bytes`."""

def release(idle_s: float, /) -> int:
    """Unmap the kept blocks freed `idle_s` seconds ago or earlier and not taken back since;
    the bytes unmapped (0 where `install` was not called)."""

def stats() -> dict[str, int]:
    """reused (requests served by a kept block), unmapped (freed past the cap), released
    (kept blocks unmapped by `release`), kept_bytes, live_blocks (ours in use)."""
