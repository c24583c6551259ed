"""Server-wide accounting of buffered body bytes."""

from __future__ import annotations

from kinference.errors import ServerBusy


class ByteBudget:
    """Counts every body byte the instance holds: being pushed, awaiting Pick, awaiting pull.

    `reserve` fails instead of letting the total pass `limit`, so one caller cannot push the
    server out of memory; every reservation is returned with `release` exactly once.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def reserve(self, nbytes: int) -> None:
        if self.used + nbytes > self.limit:
            raise ServerBusy(
                f"server-wide body budget exhausted ({self.used} of {self.limit} bytes held)"
            )
        self.used += nbytes

    def release(self, nbytes: int) -> None:
        # A double release is a bug; clamping keeps the gauge truthful anyway.
        self.used = max(self.used - nbytes, 0)

    def reserve_unchecked(self, nbytes: int) -> None:
        """Count bytes that are already held and cannot be refused (a rewrite's growth)."""
        self.used += nbytes
