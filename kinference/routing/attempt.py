"""One Pick's walk over the targets: the notes of targets that could not serve, and the
pools found ready but saturated (kept for the QoS fallback)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from kinference.config import ModelRoute, Target
from kinference.routing.decision import Decision, Outcome, RouteQuery
from kinference.routing.features import Signals
from kinference.routing.filters.saturation import OVERLOADED
from kinference.routing.reasons import Reason
from kinference.routing.table import IndexArray
from kinference.routing.textsize import TextSize

# When a NO_WORKERS joins several notes, the code of the first kind present here labels it.
_NOTE_PRIORITY = (
    Reason.PROVIDER_COOLING,
    Reason.NO_READY_ENDPOINT,
    Reason.SATURATED,
    Reason.NO_TARGET,
)


@dataclass
class Busy:
    """The first primary pool found ready but saturated, kept for the QoS fallback."""

    group: tuple[Target, ...]
    slots: IndexArray
    levels: npt.NDArray[np.int8]


@dataclass
class Attempt:
    query: RouteQuery
    route: ModelRoute
    signals: Signals
    text: TextSize | None = None  # characters per token per model (None: the prior)
    notes: list[tuple[Reason, str]] = field(default_factory=list)
    busy: list[Busy] = field(default_factory=list)  # primary pools ready but saturated
    retry_after_s: int | None = None  # the soonest a cooling provider comes back

    def note(self, code: Reason, text: str) -> None:
        self.notes.append((code, text))

    def cooling_for(self, seconds_left: float) -> None:
        """A cooling provider comes back in `seconds_left`: the soonest is the Retry-After."""
        soonest = max(1, int(seconds_left + 0.999))
        if self.retry_after_s is None or soonest < self.retry_after_s:
            self.retry_after_s = soonest

    def least_busy(self) -> Busy | None:
        """The first busy pool's workers that are saturated but not overloaded, if any."""
        for busy in self.busy:
            usable = busy.levels < OVERLOADED
            if usable.any():
                return Busy(busy.group, busy.slots[usable], busy.levels[usable])
        return None

    def no_workers(self) -> Decision:
        """NO_WORKERS naming every target tried; the code is the most telling note's."""
        if not self.notes:
            reason = f"no target of {self.route.name!r} matches"
            return Decision(Outcome.NO_WORKERS, reason=reason, code=Reason.NO_TARGET,
                            canonical_model=self.route.name)  # fmt: skip
        codes = {code for code, _ in self.notes}
        code = next((c for c in _NOTE_PRIORITY if c in codes), self.notes[0][0])
        reason = "; ".join(text for _, text in self.notes)
        return Decision(Outcome.NO_WORKERS, reason=reason, code=code,
                        canonical_model=self.route.name,
                        retry_after_s=self.retry_after_s)  # fmt: skip

    def groups(self, targets: tuple[Target, ...]) -> list[tuple[Target, ...]]:
        """Targets whose conditions hold, in order, each tried alone; a model that pools
        serve without a `models:` entry has all its pools tried as one candidate set."""
        request = self.query.request
        usable = tuple(
            t
            for t in targets
            if t.when.matches(
                # (the prompt's size is read only by a size condition: not estimated else)
                self._tokens(t.model) if _sized(t) else 0,
                request.has_tools,
                request.hint,
            )
        )
        if self.route.implicit and usable:
            return [usable]
        return [(t,) for t in usable]

    def _tokens(self, model: str) -> int:
        """The prompt's estimated tokens for `model` (its learned characters per token)."""
        request, text = self.query.request, self.text
        if text is None:
            return request.token_estimate
        chars_per_token = text.chars_per_token(model)
        return round(request.prompt.tokens_at(chars_per_token, request.token_estimate))


def _sized(target: Target) -> bool:
    """Whether `target`'s `when` has a condition on the prompt's size."""
    when = target.when
    return when.min_prompt_tokens is not None or when.max_prompt_tokens is not None
