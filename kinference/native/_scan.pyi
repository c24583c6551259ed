def run(
    data: bytes | bytearray | memoryview,
    pos: int,
    window: int,
    stack: bytearray,
    max_depth: int,
    long_string_bytes: int,
    /,
) -> tuple[int, int, int, int]:
    """The body scan's strings and brackets below the top level in data[pos:window], while
    `stack` (updated in place) is not empty: (where to go on, strings, string_bytes,
    brackets added), stopping where `JsonScanner`'s usual path must decide. The same events
    and counts as `requests.scan_run.pure_run`, over the whole window."""

def limit_counts(data: bytes | bytearray | memoryview, /) -> tuple[int, int]:
    """The bytes '{' and '[', and the bytes ':', anywhere in `data` (strings included): the
    same counts as `requests.fields.pure_limit_counts`, in one pass."""
