def install(min_bytes: int, max_bytes: int, cap_bytes: int, /) -> bool:
    """Wrap Python's raw allocator (once per process; False when it already is): requests
    of [min_bytes, max_bytes] get mappings of their own in 64 KiB classes, and freed ones are
    kept for reuse (pages already filled) while the kept ones total at most `cap_bytes`."""

def stats() -> dict[str, int]:
    """reused (requests served by a kept block), unmapped (freed past the cap), kept_bytes,
    live_blocks (ours in use)."""
