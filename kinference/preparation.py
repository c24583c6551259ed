"""What a Pick waits for before its decision, and the work begun for it at push.

The body's parse (on the loop when its upload's scan says it is cheap: `loop_cost`, else in
the parse worker), its translation when a target takes another API and it has large values
(the parse worker), and, when precise pools may serve it, its prompt tokenized
(`kinference.tokenize`; begun at push when the parse runs on the loop: `early`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from kinference.bodies import Body, BodyStore
from kinference.config import Policy
from kinference.early import EarlyStarts, Prepared
from kinference.errors import ResourceExhausted
from kinference.kvcache.precise import PreciseQuery
from kinference.records import record
from kinference.requests import InferenceRequest, MalformedRequest, parse_request
from kinference.requests.loop_cost import parse_cost
from kinference.requests.offload import INLINE_PARSE_BYTES, Offload
from kinference.requests.rewrite import Translation, heavy_translation
from kinference.requests.translation import Untranslatable
from kinference.routing.apis import translated_shape

T = TypeVar("T")


class Preparer(Protocol):
    """Tokenizes a prompt for the precise pools that may serve it (kinference.tokenize)."""

    @property
    def active(self) -> bool: ...

    async def prepare(self, request: InferenceRequest, body: Body) -> PreciseQuery | None: ...

    def deciding(self) -> None: ...


@record  # built every Pick
class Ready:
    """A Pick's body made ready for its decision: parsed (or why not), tokenized for the
    precise pools, translated ahead; `held` bytes of the body budget to return after it."""

    parsed: InferenceRequest | str
    precise: PreciseQuery | None = None
    translated: Translation | Untranslatable | None = None
    held: int | None = None
    begun: bool = False  # its prompt was tokenized from its push on (`early`)


class PickPreparation:
    """Parses, translations and tokenizations of Picks' bodies; built by the composition
    root (the parse worker and the tokenizer are its to start and stop)."""

    def __init__(
        self,
        store: BodyStore,
        policy: Callable[[], Policy],
        *,
        offload: Offload | None = None,
        preparer: Preparer | None = None,
    ) -> None:
        """`policy`: the policy in force (which APIs the model's targets take)."""
        self.store = store
        self.offload = offload or Offload()  # the worker process heavy bodies go to
        self.preparer = preparer  # tokenizes prompts for precise pools (None: none)
        self._policy = policy
        self._early = EarlyStarts(store.budget)  # parses and tokenizations begun at push

    def begin(self, stream_id: int, body: Body) -> None:
        """Start what the Pick of a complete body will wait for, when precise pools may
        need its prompt tokenized and its parse runs on the loop."""
        preparer = self.preparer
        if preparer is None or not preparer.active:
            return
        held = self._loop_parse(body)
        if held is None:
            return
        if not self._early.begin(stream_id, held, lambda: self._prepared(body)) and held:
            self.store.budget.release(held)

    def parse(self, body: Body) -> InferenceRequest | str:
        """`body` parsed here and now (a synchronous Pick), or why it is malformed."""
        return parsed_body(body)

    def cancel(self, stream_id: int) -> None:
        """The Pick of `stream_id` does without the work begun for it (a synchronous Pick)."""
        self._early.cancel(stream_id)

    def drop(self, gone: Callable[[int], bool]) -> None:
        """Cancel the work of bodies that are `gone` (expired before their Pick)."""
        self._early.drop(gone)

    async def ready(self, stream_id: int, body: Body) -> Ready:
        """Everything the decision of `stream_id`'s Pick needs but the tenant's lease; the
        caller returns `held` to the body budget once the Pick ends (also on error)."""
        early = self._early.take(stream_id)
        held = early.held if early is not None else self._loop_parse(body)
        try:
            return await self._ready(body, early.task if early is not None else None, held)
        except BaseException:
            if held:
                self.store.budget.release(held)
            raise

    async def _ready(
        self, body: Body, early: asyncio.Task[Prepared] | None, held: int | None
    ) -> Ready:
        preparer, precise = self.preparer, None
        if early is not None:
            parsed, precise = await self.guarded(body, asyncio.shield(early))
            return Ready(parsed, precise, await self._translated(body, parsed), held, True)
        elif held is not None:
            parsed = parsed_body(body)
        else:  # the parse's memory is charged to the body budget while it runs
            parsed = await self.offload.parse(
                self.store.budget, body, abandoned=lambda: self.store.release(body)
            )
        if isinstance(parsed, str):
            return Ready(parsed, held=held)
        translated = await self._translated(body, parsed)
        if preparer is not None and preparer.active:
            precise = await self.guarded(body, preparer.prepare(parsed, body))
        return Ready(parsed, precise, translated, held)

    def deciding(self, ready: Ready) -> None:
        """The decision of `ready` runs in this loop step: background tokenization waits
        until it ends (as while `prepare` runs: a prompt tokenized at push had its
        `prepare` end before)."""
        if ready.begun and self.preparer is not None:
            self.preparer.deciding()

    async def guarded(self, body: Body, step: Awaitable[T]) -> T:
        """`step`'s result; the body released if it raises or is cancelled."""
        try:
            return await step
        except BaseException:
            self.store.release(body)
            raise

    async def _prepared(self, body: Body) -> Prepared:
        """A body's parse and tokenization, begun at push (`early`)."""
        parsed = parsed_body(body)
        preparer = self.preparer
        if isinstance(parsed, str) or preparer is None or not preparer.active:
            return parsed, None
        return parsed, await preparer.prepare(parsed, body)

    def _loop_parse(self, body: Body) -> int | None:
        """None when `body` goes to the parse worker; else it is parsed on the loop, and
        this is what its parsed request may hold, reserved from the body budget until the
        Pick ends (0 for a small body: not counted)."""
        if body.size <= INLINE_PARSE_BYTES:
            return 0
        cost = parse_cost(body)
        if cost is None or not cost.on_loop:
            return None
        try:
            self.store.budget.reserve(cost.memory_bytes)
        except ResourceExhausted:
            return None  # the worker's path reserves what it needs, or says why it cannot
        return cost.memory_bytes

    async def _translated(
        self, body: Body, request: InferenceRequest | str
    ) -> Translation | Untranslatable | None:
        """The translation of a body with large values, done in the parse worker, when a
        target of its model may take it in another API; None when there is none to do."""
        if isinstance(request, str):
            return None
        if body.size <= INLINE_PARSE_BYTES or not heavy_translation(body, request):
            return None
        sent = translated_shape(self._policy(), request.shape, request.model)
        if sent is None:
            return None
        return await self.offload.translate(
            self.store.budget, body, request, sent, abandoned=lambda: self.store.release(body)
        )


def parsed_body(body: Body) -> InferenceRequest | str:
    """The request in `body`, or why it is none (MalformedRequest's message)."""
    try:
        return parse_request(body, path=body.request_path)
    except MalformedRequest as exc:
        return str(exc)
