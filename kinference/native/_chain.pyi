def hashes(
    data: bytes | bytearray | memoryview,
    block_bytes: int,
    count: int,
    seed: int,
    known: tuple[int, ...],
    same: int,
    /,
) -> tuple[int, ...]:
    """The chained hashes of blocks 0..count - 1 of `data`: `known[:same]`, then the chain
    continued from `known[same - 1]` (`seed`, modulo 2**64, xor-ed into block 0's value
    when `same` is 0). The same bits and exceptions as `routing.chain.chain_tuple`."""

def identities(tokens: bytes | bytearray | memoryview, block_size: int, first: int, /) -> list[int]:
    """The identities of every full block of `tokens` (a C-contiguous buffer of native
    uint32 token ids): `id_i = id_(i-1) * B + content_i` mod 2**64, `id_-1 = first`
    (modulo 2**64). The same bits as `kvcache.blocks.identities`."""
