"""Which response ids are still answered for, so that a new one is never one of them."""

from __future__ import annotations

from kinference.bodies import BodyStore
from kinference.routing import InFlight


class ResponseIdsInUse:
    """Response ids still answered for: in flight, or naming a parked body."""

    def __init__(self, inflight: InFlight, store: BodyStore) -> None:
        self._inflight = inflight
        self._store = store

    def __contains__(self, response_id: object) -> bool:
        if response_id in self._inflight:
            return True
        return isinstance(response_id, int) and self._store.is_parked(response_id)
