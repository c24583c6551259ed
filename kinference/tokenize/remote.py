"""A large chat prompt decoded and rendered in the parse worker process, not in the picker's.

Of the event loop's stalls over 10 ms at 1 MiB, a third were the tokenizer thread holding
the GIL in one C call (docs/benchmarks.md, h141): a conversation's first decode of its
messages (msgspec, 5.6-10 ms a MiB) and the render's output join (3-4 ms). So a chat whose
messages were left unparsed at Pick (a `LargeValue`: over 1 MiB) with a span of at least
`KINFERENCE_TOKENIZE_WORKER_BYTES` is decoded and rendered in the parse worker
(`requests/worker.py`, the process big bodies are parsed in, one job at a time): the
messages' bytes go there, the rendered text comes back (UTF-8) through a pipe of its own,
read on a thread into a fresh mapping (the loop neither copies nor decodes it), and becomes
a `str` on the tokenizer thread (one C call of ~0.1-0.5 ms a MiB).

The worker keeps a `DecodedHistory` of its own, so a conversation's next turn decodes there
only the messages it adds, as the tokenizer thread did; it loads each chat template once
(again when its file changes). The text is the one the tokenizer thread would render (the
same `ChatTemplate` on the same file, the same decode: `source.span_value`), so the token
ids are the same, and so are the problems named. When the worker cannot do it (it died, ran
past its deadline, or failed), the prompt is decoded and rendered on the tokenizer thread as
before.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kinference.bodies import Body, Piece
from kinference.errors import Unavailable
from kinference.requests import InferenceRequest, LargeValue, Shape
from kinference.tokenize.begun import Profile
from kinference.tokenize.history import DecodedHistory
from kinference.tokenize.source import span_value
from kinference.tokenize.template import ChatTemplate, TemplateError
from kinference.tokenize.tokenizer import Untokenizable

log = logging.getLogger(__name__)

# Per template file: its text's UTF-8 bytes in the payload, or the problem (a Pick's text).
Outcomes = tuple[int | str, ...]


@dataclass(frozen=True, slots=True)
class RenderJob:
    """What the worker is sent besides the messages' bytes (the frame's payload)."""

    templates: tuple[str, ...]  # chat template files, each rendered once
    tools: list[Any] | None  # parsed at Pick (a `LargeValue` of tools is not sent)


@dataclass(frozen=True, slots=True)
class RenderAnswer:
    """The worker's answer: each template's outcome, and the JSON bytes it decoded."""

    outcomes: Outcomes
    decoded_bytes: int


class Worker(Protocol):
    """The parse worker as the picker reaches it (`requests.offload.Offload.render`)."""

    async def render(self, job: RenderJob, payload: Sequence[Piece]) -> tuple[Any, memoryview]: ...


class RemoteRender:
    """The picker's side: which prompts go to the worker, and their texts back."""

    def __init__(self, worker: Worker, min_bytes: int) -> None:
        """`min_bytes`: messages spans this large or larger go (0: none does)."""
        self._worker = worker
        self.min_bytes = min_bytes

    def job(
        self, request: InferenceRequest, profiles: Sequence[Profile]
    ) -> tuple[RenderJob, LargeValue] | None:
        """The render `request` sends to the worker for `profiles`, if it sends one."""
        if not self.min_bytes or request.shape is not Shape.CHAT:
            return None
        messages = request.fields.values.get("messages")
        if not isinstance(messages, LargeValue) or messages.end - messages.start < self.min_bytes:
            return None
        tools = request.fields.values.get("tools")
        templates = tuple(dict.fromkeys(profile[1] for profile in profiles))
        if isinstance(tools, LargeValue) or any(t is None for t in templates):
            return None  # left to the tokenizer thread, which says what it cannot do
        sent = tools if isinstance(tools, list) else None
        return RenderJob(tuple(t for t in templates if t is not None), sent), messages

    async def texts(
        self, job: RenderJob, span: LargeValue, body: Body
    ) -> tuple[dict[str, memoryview] | str, int] | None:
        """Each template's rendered text (UTF-8, a view of what came back: no copy), or the
        prompt's problem, and the JSON bytes the worker decoded; None when the worker could
        not (render it here)."""
        try:
            answer, payload = await self._worker.render(job, body.views(span.start, span.end))
        except Unavailable as exc:
            log.warning("rendering a large prompt in the parse worker failed: %s", exc)
            return None
        assert isinstance(answer, RenderAnswer)
        texts, at, view = {}, 0, payload
        for template, outcome in zip(job.templates, answer.outcomes, strict=True):
            if isinstance(outcome, str):
                return outcome, answer.decoded_bytes
            texts[template] = view[at : at + outcome]
            at += outcome
        return texts, answer.decoded_bytes

    async def warm(self, templates: Sequence[str]) -> None:
        """Have the worker import what renders need and load `templates` (~0.1 s), so that
        the first large prompt does not wait for it."""
        if self.min_bytes and templates:
            body = Body([_WARM], reserved=0)
            span = LargeValue(0, len(_WARM), "[")
            await self.texts(RenderJob(tuple(templates), None), span, body)


_WARM = b'[{"role": "user", "content": "warm"}]'


class Renders:
    """The worker's side: its decoded history and loaded templates, across jobs."""

    def __init__(self) -> None:
        self.history = DecodedHistory()
        self._templates: dict[str, tuple[tuple[int, int], ChatTemplate]] = {}

    def run(self, job: RenderJob, span: bytes) -> tuple[RenderAnswer, bytes]:
        before = self.history.decoded_bytes
        texts: list[bytes] = []
        outcomes: list[int | str] = []
        try:
            messages = span_value(Body([span], reserved=0), 0, len(span), self.history)
            if not isinstance(messages, list):
                raise Untokenizable("messages is not an array")
        except Untokenizable as exc:
            problem = f"prompt not tokenized: {exc}"
            return RenderAnswer((problem,) * len(job.templates), len(span)), b""
        decoded = self.history.decoded_bytes - before
        for path in job.templates:
            try:
                text = self._template(path).render(messages, job.tools)
            except (TemplateError, OSError) as exc:
                outcomes.append(f"prompt not tokenized: {exc}")
                continue
            texts.append(text.encode("utf-8", "surrogatepass"))
            outcomes.append(len(texts[-1]))
        return RenderAnswer(tuple(outcomes), decoded), b"".join(texts)

    def _template(self, path: str) -> ChatTemplate:
        stat = os.stat(path)
        version = (stat.st_mtime_ns, stat.st_size)
        found = self._templates.get(path)
        if found is None or found[0] != version:
            found = self._templates[path] = (version, ChatTemplate.from_file(path))
        return found[1]


def text_of(encoded: memoryview) -> str:
    """A rendered text back from the worker (`Renders.run` encoded it)."""
    return str(encoded, "utf-8", "surrogatepass")
