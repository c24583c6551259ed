"""A clock the test moves by hand, for code that takes a `Callable[[], float]` clock."""

from __future__ import annotations


class FakeClock:
    """Returns `now` (seconds) until the test moves it: by assigning `now` or `advance`."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
