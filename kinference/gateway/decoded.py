"""A response body its upstream compressed although the gateway asked for `identity`,
decoded as it comes.

The gateway sends `accept-encoding: identity` upstream and relays no `content-encoding`
(kinference.gateway.upstream): metering, timing and the transforms read the bytes. An
upstream that compresses anyway (a proxy in front of a provider ignoring the header) had its
gzip bytes relayed to the client as if plain (the header was dropped: httpx, before, decoded
on its own). `gzip` and `deflate` are decoded here, in pieces of at most `PIECE` bytes (a few
compressed bytes can inflate to gigabytes: they go out at the client's pace, never held);
any other coding fails the response as broken.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

from kinference.gateway.http1_conn import Broken

PIECE = 256 * 1024  # the most decoded bytes handed out at once
_WBITS = {"gzip": 31, "x-gzip": 31, "deflate": 15}  # deflate: zlib-wrapped (RFC 9110)


class Decoder:
    """One body's decompressor."""

    def __init__(self, coding: str) -> None:
        self.coding = coding
        self._z = zlib.decompressobj(_WBITS[coding])

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The decoded bytes of `data`, in pieces of at most `PIECE`; raises Broken."""
        z = self._z
        try:
            piece = z.decompress(data, PIECE)
            while True:
                if piece:
                    yield piece
                if len(piece) < PIECE:
                    return
                piece = z.decompress(z.unconsumed_tail, PIECE)
        except zlib.error as exc:
            raise Broken(f"the upstream's {self.coding} body does not decode: {exc}") from None

    def end(self) -> bytes:
        """What the decompressor still holds at the end of the body; raises Broken."""
        try:
            return self._z.flush()
        except zlib.error as exc:  # pragma: no cover (flush fails only on a corrupt state)
            raise Broken(f"the upstream's {self.coding} body does not decode: {exc}") from None


def decoder_for(encoding: str) -> Decoder | None:
    """The decoder of a response's `content-encoding` (None for none); raises Broken for a
    coding the gateway cannot decode."""
    coding = encoding.strip().lower()
    if coding in ("", "identity"):
        return None
    if coding not in _WBITS:
        raise Broken(f"the upstream sent content-encoding {coding[:40]!r}, asked for identity")
    return Decoder(coding)
