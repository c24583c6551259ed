"""The prefix index's block-hash chain spelled out block by block, as its definition says
(struct "<Q" words, zero-padded; `kinference.routing.chain`): the oracle the vectorised,
continued and C forms are held to (tests/routing/test_blocks.py, tests/native/test_chain.py)."""

from __future__ import annotations

from kinference.routing.chain import mix, seed

MASK = (1 << 64) - 1
LANES = (
    0x87C37B91114253D5, 0x4CF5AD432745937F, 0x52DCE729DA3ED7B5, 0x38495AB5D6E6E2AB,
    0xA0761D6478BD642F, 0xE7037ED1A0B428DB, 0x8EBC6AF09C88C6E3, 0x589965CC75374CC3,
)  # fmt: skip


def spelled_out(model: str, data: bytes, block_bytes: int, count: int) -> tuple[int, ...]:
    """The hashes of blocks 0..`count` - 1 of `data`, one at a time."""
    chained, hashes = 0, []
    for index in range(count):
        block = data[index * block_bytes : (index + 1) * block_bytes]
        block += bytes(-len(block) % 8)
        words = [int.from_bytes(block[i : i + 8], "little") for i in range(0, len(block), 8)]
        value = mix(sum(w * LANES[i % 8] for i, w in enumerate(words)) & MASK)
        value = value ^ seed(model) if index == 0 else value
        chained = (chained * 0x9E3779B97F4A7C15 + value) & MASK
        hashes.append(mix(chained))
    return tuple(hashes)
