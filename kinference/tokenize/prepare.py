"""Tokenizing a Pick's prompt for the precise pools that may serve it, off the event loop.

Before routing, the service asks which pools in `prefix: {mode: precise}` the requested
model can go to and has the prompt tokenized once per distinct tokenizer (tokenizer.json,
chat template, block size) on one dedicated thread, which owns every tokenizer and its
turn cache (so they need no locks). The loop only waits: the Rust tokenizer runs without
the GIL, and the Python around it (template, digests, block naming) is preempted at the
interpreter's switch interval, so a 1 MiB prompt does not stall other Picks. A prompt that
takes longer than `timeout_s` is routed on the approximate index (DEGRADED).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable
from dataclasses import dataclass

from kinference.bodies import Body
from kinference.config import Policy, Pool
from kinference.kvcache.blocks import PromptBlocks
from kinference.kvcache.precise import PreciseQuery
from kinference.requests import InferenceRequest
from kinference.tokenize.source import prompt_text
from kinference.tokenize.template import TemplateError
from kinference.tokenize.tokenizer import PromptTokenizer, Untokenizable

log = logging.getLogger(__name__)

Profile = tuple[str, str | None, int]  # tokenizer path, chat template path, block size
DEFAULT_TIMEOUT_S = 2.0
# Bodies above this are not tokenized (routed on the approximate index, DEGRADED): a 100 MiB
# prompt would hold the tokenizer thread for minutes. 1 MiB prompts take ~1 s already.
MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_QUEUED = 64  # prompts waiting for the tokenizer thread; more are not tokenized


@dataclass(frozen=True, slots=True)
class _Plan:
    profiles: dict[str, Profile]  # precise pool ref -> its profile
    by_model: dict[str, tuple[str, ...]]  # requested model or alias -> precise pool refs


class PromptPreparer:
    """Tokenizes prompts for precise pools; built by the composition root."""

    def __init__(
        self,
        policy: Policy,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        observe: Callable[[float], None] = lambda seconds: None,
    ) -> None:
        self.timeout_s = timeout_s
        self._observe = observe  # seconds per tokenized prompt
        self._executor = concurrent.futures.ThreadPoolExecutor(1, "kinference-tokenize")
        self._tokenizers: dict[Profile, PromptTokenizer] = {}  # touched on the thread only
        self._plan = _plan(policy)
        self._queued = 0  # prompts submitted to the thread and not finished

    def _dequeued(self, _: object) -> None:
        self._queued -= 1

    @property
    def active(self) -> bool:
        return bool(self._plan.profiles)

    def apply_policy(self, policy: Policy) -> None:
        self._plan = _plan(policy)

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
        wanted = {plan.profiles[ref] for ref in pools}
        loop = asyncio.get_running_loop()
        self._queued += 1
        future = loop.run_in_executor(self._executor, self._run, wanted, request, body)
        future.add_done_callback(self._dequeued)
        try:
            async with asyncio.timeout(self.timeout_s):
                done = await asyncio.shield(future)
        except TimeoutError:
            return PreciseQuery({}, f"prompt not tokenized within {self.timeout_s:g}s")
        if isinstance(done, str) or done is None:
            return None if done is None else PreciseQuery({}, done)
        return PreciseQuery({ref: done[plan.profiles[ref]] for ref in pools})

    def _refusal(self, body: Body) -> str | None:
        """Why this prompt is not tokenized at all, if it is not."""
        if body.size > MAX_BODY_BYTES:
            return f"body over {MAX_BODY_BYTES} bytes"
        if self._queued >= MAX_QUEUED:
            return f"{MAX_QUEUED} prompts queued for the tokenizer"
        return None

    def _run(
        self, wanted: set[Profile], request: InferenceRequest, body: Body
    ) -> dict[Profile, PromptBlocks] | str | None:
        """On the tokenizer thread: blocks per profile, a problem, or None (shape not
        tokenized here)."""
        try:
            text = prompt_text(request, body)
            if text is None:
                return None
            result = {}
            for profile in wanted:
                blocks = self._tokenizer(profile).blocks(text)
                self._observe(blocks.seconds)
                result[profile] = blocks
            return result
        except (Untokenizable, TemplateError, OSError) as exc:
            return f"prompt not tokenized: {exc}"
        except Exception as exc:  # a tokenizer bug must not fail the Pick
            log.exception("tokenizing a prompt failed")
            return f"prompt not tokenized: {type(exc).__name__}"

    def _tokenizer(self, profile: Profile) -> PromptTokenizer:
        found = self._tokenizers.get(profile)
        if found is None:
            found = self._tokenizers[profile] = PromptTokenizer.from_files(*profile)
        return found

    def warm(self) -> None:
        """Load every tokenizer now (on its thread), so the first Pick does not pay for it."""
        for profile in set(self._plan.profiles.values()):
            self._executor.submit(self._tokenizer, profile)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _plan(policy: Policy) -> _Plan:
    profiles = {pool.ref: _profile(pool) for pool in policy.pools if pool.prefix.mode == "precise"}
    by_model: dict[str, tuple[str, ...]] = {}
    names = {name for pool in policy.pools for name in pool.models}
    names.update(name for entry in policy.models for name in (entry.name, *entry.aliases))
    for name in names:
        route = policy.resolve_model(name)
        if route is None:
            continue
        refs = tuple(dict.fromkeys(t.pool for t in route.targets if t.pool in profiles))
        if refs:
            by_model[name] = refs
    return _Plan(profiles, by_model)


def _profile(pool: Pool) -> Profile:
    config = pool.prefix
    assert config.tokenizer is not None  # validated for mode precise
    return (config.tokenizer, config.chat_template, config.block_size)
