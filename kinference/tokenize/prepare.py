"""Tokenizing a Pick's prompt for the precise pools that may serve it, off the event loop.

Before routing, the service asks which pools in `prefix: {mode: precise}` the requested
model can go to and has the prompt tokenized once per distinct tokenizer (tokenizer.json,
chat template, block size) on the tokenizer thread (`worker`), which owns every tokenizer
and its piece cache. Lazily (`lazy`): only until a block that no worker of those pools holds
or is about to hold (nothing after it can match), at most `FOREGROUND_CHARS` of new text
and `foreground_s` per Pick (then its prediction is a floor: `kvcache.source`); the rest
after the Pick, between other Picks' work, so that the next turn finds its pieces known,
and its blocks join the chosen worker's pending blocks (`PreciseCaches.completed`). The loop
only waits: the Rust tokenizer runs without the GIL and every Python step is small (a piece
of ~1 KiB). A prompt that takes longer than `timeout_s` is routed approximately (DEGRADED).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import itertools
import logging
import time
from collections.abc import Callable

from kinference.bodies import Body
from kinference.config import Policy
from kinference.kvcache.blocks import PromptBlocks
from kinference.kvcache.precise import PreciseCaches, PreciseQuery
from kinference.requests import InferenceRequest
from kinference.tokenize import bounds
from kinference.tokenize.begun import Outcome, Profile, Started
from kinference.tokenize.history import DecodedHistory
from kinference.tokenize.lazy import Known, Tokenization
from kinference.tokenize.loaded import Tokenizers
from kinference.tokenize.plan import Plan, plan_of
from kinference.tokenize.source import prompt_text
from kinference.tokenize.template import TemplateError
from kinference.tokenize.tokenizer import PromptText, Untokenizable
from kinference.tokenize.worker import TokenizerThread

log = logging.getLogger(__name__)


class PromptPreparer:
    """Tokenizes prompts for precise pools; built by the composition root."""

    def __init__(
        self,
        policy: Policy,
        *,
        caches: PreciseCaches | None = None,
        timeout_s: float = bounds.DEFAULT_TIMEOUT_S,
        observe: Callable[[float], None] = lambda seconds: None,
        foreground_s: float = bounds.FOREGROUND_S,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.timeout_s = timeout_s
        self.foreground_s = foreground_s
        self._clock = clock  # for the Picks' time bounds (`INLINE_S`, `foreground_s`)
        self._caches = caches  # read from the thread (see PoolCaches.reach)
        self._observe = observe  # seconds per tokenized prompt
        self._thread = TokenizerThread()
        # Touched on the thread only (or `here`, holding its work): short texts are encoded
        # holding the GIL on it, not on the event loop's thread (`PromptTokenizer`).
        self._tokenizers = Tokenizers(later=self._thread.later, hold_gil=self._thread.current)
        self._history = DecodedHistory()  # large messages decoded once a conversation: ditto
        self._plan = plan_of(policy)
        self._tickets = itertools.count(1)
        self._later_chars = 0  # text of unfinished background work (on the thread only)
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def active(self) -> bool:
        return bool(self._plan.profiles)

    def apply_policy(self, policy: Policy) -> None:
        self._plan = plan_of(policy)
        self.warm()  # a new pool's tokenizer, before its first Pick

    async def prepare(self, request: InferenceRequest, body: Body) -> PreciseQuery | None:
        """The prompt's engine blocks per precise pool that may serve it (None: no such
        pool); a prompt that cannot be tokenized gives a query naming the problem."""
        plan = self._plan
        pools = plan.by_model.get(request.model)
        if not pools:
            return None
        refused = self._refusal(body)
        if refused is not None:
            return PreciseQuery({}, f"prompt not tokenized: {refused}")
        self._loop = loop = asyncio.get_running_loop()
        self._thread.picking()
        deadline = self._clock() + self.foreground_s
        try:
            here = self._here(plan, pools, request, body, deadline)
            done = None if here is None else here[0]
            if here is None or isinstance(done, Started):
                begun = done if isinstance(done, Started) else None
                future = asyncio.wrap_future(
                    self._thread.submit(
                        lambda: self._run(plan, pools, request, body, begun, deadline=deadline)
                    )
                )
                async with asyncio.timeout(self.timeout_s):
                    done = await asyncio.shield(future)
        except TimeoutError:
            return PreciseQuery({}, f"prompt not tokenized within {self.timeout_s:g}s")
        finally:  # once the caller's step (routing the Pick on return) ends:
            loop.call_soon(self._thread.picked)
        if isinstance(done, str) or done is None:
            return None if done is None else PreciseQuery({}, done)
        assert not isinstance(done, Started)  # the thread takes a prompt to its stop
        return PreciseQuery({ref: done[plan.profiles[ref]] for ref in pools})

    def deciding(self) -> None:
        """A Pick whose prompt was tokenized earlier (at push) is being decided: background
        work waits until the loop's current step ends, as while `prepare` runs."""
        self._thread.picking()
        asyncio.get_running_loop().call_soon(self._thread.picked)

    def _here(
        self,
        plan: Plan,
        pools: tuple[str, ...],
        request: InferenceRequest,
        body: Body,
        deadline: float,
    ) -> tuple[Outcome] | None:
        """The prompt's first steps on the loop, if the thread is idle (None: it is not, or
        the body is too large, or has too many messages, to render here): `Started` if its
        rest needs the thread."""
        messages = request.fields.values.get("messages")
        if body.size > bounds.INLINE_BODY_BYTES or (
            isinstance(messages, list) and len(messages) > bounds.INLINE_MESSAGES
        ):
            return None
        return self._thread.here(
            lambda: self._run(plan, pools, request, body, None, deadline=deadline, inline=True)
        )

    def _refusal(self, body: Body) -> str | None:
        """Why this prompt is not tokenized at all, if it is not."""
        if body.size > bounds.MAX_BODY_BYTES:
            return f"body over {bounds.MAX_BODY_BYTES} bytes"
        if self._thread.waiting >= bounds.MAX_QUEUED:
            return f"{bounds.MAX_QUEUED} prompts queued for the tokenizer"
        return None

    def _run(
        self,
        plan: Plan,
        pools: tuple[str, ...],
        request: InferenceRequest,
        body: Body,
        begun: Started | None,
        *,
        deadline: float,
        inline: bool = False,
    ) -> Outcome:
        """Holding the thread's work (on it, or `here`): blocks per profile, a problem,
        None (shape not tokenized here), or, `inline`, what is left for the thread."""
        try:
            if begun is None:
                text = prompt_text(request, body, self._history)
                if text is None:
                    return None
                begun = self._start(plan, pools, text)
            return self._advance(begun, deadline, inline)
        except (Untokenizable, TemplateError, OSError) as exc:
            return f"prompt not tokenized: {exc}"
        except Exception as exc:  # a tokenizer bug must not fail the Pick
            log.exception("tokenizing a prompt failed")
            return f"prompt not tokenized: {type(exc).__name__}"

    def _start(self, plan: Plan, pools: tuple[str, ...], text: PromptText) -> Started:
        started = time.perf_counter()
        begun = Started()
        for profile in {plan.profiles[ref] for ref in pools}:
            refs = plan.refs(profile, pools)
            work = self._tokenizers.get(profile).start(text)
            begun.add(profile, refs, work, self._known(refs))
        begun.seconds = time.perf_counter() - started
        return begun

    def _advance(
        self, begun: Started, deadline: float, inline: bool
    ) -> Started | dict[Profile, PromptBlocks]:
        """Tokenize each profile's prompt on to its stop (`lazy`): on the loop at most
        `INLINE_CHARS` new and steps begun within `INLINE_S`, else `_foreground`."""
        started = time.perf_counter()
        for profile in list(begun.open):
            work = begun.work[profile]
            assert isinstance(work, Tokenization)
            known = begun.known[profile]
            if inline:
                until = min(self._clock() + bounds.INLINE_S, deadline)
                work.advance(known, bounds.INLINE_CHARS, until, clock=self._clock, marks=False)
            else:
                self._foreground(work, known, deadline)
            if work.done or not inline or work.reached:
                begun.open.discard(profile)
        begun.seconds += time.perf_counter() - started
        if begun.open:
            return begun
        return {profile: self._blocks(profile, begun) for profile in begun.work}

    def _foreground(self, work: Tokenization, known: Known | None, deadline: float) -> None:
        """The rest of a Pick's walk (the loop's share included): within `FOREGROUND_CHARS`
        and steps begun before `deadline`; a Pick past `deadline` already takes where
        another tokenization of its text got, and goes on only if its rest is short
        (`LATE_CHARS`: a next turn's new text)."""
        clock, short = self._clock, work.chars - work.position <= bounds.LATE_CHARS
        if not short and clock() >= deadline:
            work.catch_up_only(known)
            return
        work.advance(
            known, max(bounds.FOREGROUND_CHARS - work.encoded_chars, 0),
            None if short else deadline, clock=clock, step_pieces=bounds.FOREGROUND_STEP_PIECES,
        )  # fmt: skip

    def _blocks(self, profile: Profile, begun: Started) -> PromptBlocks:
        """A profile's prompt at its stop: its blocks, its rest queued for the background."""
        work = begun.work[profile]
        if isinstance(work, PromptBlocks):
            return work
        work.seconds = begun.seconds
        self._observe(work.seconds)
        if work.done:
            if not self._thread.later(work.leave_marks):  # for later Picks: after this one
                work.leave_marks()
            return work.result()
        refs = begun.refs[profile]
        ticket = next(self._tickets)
        if self._later_chars + work.chars > bounds.MAX_LATER_CHARS:
            work.leave_marks()
            return work.result()  # no rest to expect: tokenized no further
        self._later_chars += work.chars
        if not self._thread.later(lambda: self._finish(work, refs, ticket)):
            self._later_chars -= work.chars
            work.leave_marks()
            return work.result()
        return work.result(ticket)  # its first slice leaves the marks (`catch_up`)

    def _known(self, refs: list[str]) -> Known | None:
        return self._caches.reach(refs) if self._caches is not None else None

    def _finish(self, begun: Tokenization, refs: list[str], ticket: int) -> None:
        """Background: tokenize a slice more of a prompt; when done, hand its blocks over."""
        try:
            begun.advance(None, bounds.LATER_SLICE_CHARS)
        except Untokenizable:  # a client's text (a lone surrogate past the Pick's part)
            self._later_chars -= begun.chars  # its rest is never expected
            return
        except BaseException:  # a tokenizer bug: logged by the thread, its text let go
            self._later_chars -= begun.chars
            raise
        time.sleep(0)  # hand the GIL to the event loop between slices, if it waits
        if not begun.done and self._thread.later(lambda: self._finish(begun, refs, ticket)):
            return
        self._later_chars -= begun.chars
        if not begun.done:
            return  # dropped (too much queued): its rest is never expected
        loop, caches = self._loop, self._caches
        usable = tuple(begun.blocks[: max(begun.tokens - 1, 0) // begun.block_size])
        if loop is None or caches is None:
            return
        for ref in refs:
            try:
                loop.call_soon_threadsafe(caches.completed, ref, ticket, usable)
            except RuntimeError:  # the loop closed meanwhile: nobody needs them
                return

    def warm(self) -> list[concurrent.futures.Future[None]]:
        """Load every tokenizer and template now (on its thread) and run each once, so the
        first Pick pays for neither."""
        profiles = set(self._plan.profiles.values())
        return [self._thread.submit(functools.partial(self._warm, p)) for p in profiles]

    async def warmed(self) -> None:
        """`warm`, waited for up to `WARM_S` (before SERVING); a failure comes at Picks."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(bounds.WARM_S):
                await asyncio.gather(*map(asyncio.wrap_future, self.warm()), return_exceptions=True)

    def _warm(self, profile: Profile) -> None:
        self._tokenizers.refresh(profile).warm()  # files changed since are loaded again

    def close(self) -> None:
        self._thread.close()
