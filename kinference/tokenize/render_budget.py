"""A chat template's render bounded in work: each loop iteration is a step, each call the
template makes `CALL_STEPS`, and a render past its budget stops (`Exhausted`).

The template is the operator's, the messages the caller's. Jinja's sandbox stops a `range`
at 100,000 items, not two of them nested; nor a macro that calls itself twice per level, nor
a loop over the messages inside another over them: such a render ran for minutes in the
tokenizer thread, and every later Pick of the pool waited behind it. A step costs about
0.1-0.5 µs of the thread's CPU (an iteration 0.1, with a body doing little 0.4), a call
(a method, a macro) 2-5 µs: hence `CALL_STEPS`. Real templates take 1-2 iterations and a
few calls per message (HF's chatml, Llama 3, Qwen 3: tests/tokenize/test_render_budget.py),
so `BASE_STEPS` plus `STEPS_PER_MESSAGE` per message is far from any of them; a render that
reaches it has cost some 20-100 ms for a short conversation and about a second at the
message limit (`template.MAX_MESSAGES`, 4,096), where it ran without end.

How: `MeteredSandbox.compile` passes every `{% for %}`'s iterable through the filter
`STEP_FILTER` (a filter, not a call, so that what the sandbox's `call` guards does not see
it), which charges a sized iterable's length at once and counts a range's or an
iterator's items as they come), and `call` (every call a sandboxed
template makes: functions, methods, macros) counts `CALL_STEPS` (a recursive loop's
`LOOP_CALL_STEPS`, its iterable passed through the filter: `loop(...)` is not a `for`).
The budget of the render under way is a context variable set by `metered`; a render
outside it is not counted.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable, Iterator, Sized
from contextlib import contextmanager
from typing import Any

from jinja2 import nodes
from jinja2.exceptions import SecurityError
from jinja2.runtime import LoopContext
from jinja2.sandbox import ImmutableSandboxedEnvironment

BASE_STEPS = 100_000  # steps any render may take (a tools list, a system prompt, set-up)
STEPS_PER_MESSAGE = 500  # and per message
CALL_STEPS = 10  # a call's steps (a call costs about ten bare iterations)
LOOP_CALL_STEPS = 100  # a recursive loop's call (`loop(children)`: a new loop, ~17 µs)
STEP_FILTER = "__kinference_steps__"


class Exhausted(BaseException):
    """The render used its budget of steps (a BaseException: no filter swallows it)."""

    def __init__(self, budget: int) -> None:
        super().__init__(budget)
        self.budget = budget


class Meter:
    """A render's budget of steps, and what is left of it."""

    __slots__ = ("budget", "left")

    def __init__(self, budget: int) -> None:
        self.budget = self.left = budget

    def charge(self, steps: int) -> None:
        self.left -= steps
        if self.left < 0:
            raise Exhausted(self.budget)

    def count(self, iterable: Iterable[Any]) -> Iterator[Any]:
        for item in iterable:
            self.left -= 1
            if self.left < 0:
                raise Exhausted(self.budget)
            yield item


_METER: contextvars.ContextVar[Meter | None] = contextvars.ContextVar(
    "kinference_render_meter", default=None
)


def budget_for(messages: int) -> int:
    return BASE_STEPS + STEPS_PER_MESSAGE * messages


@contextmanager
def metered(budget: int) -> Iterator[Meter]:
    """Count the steps of the renders within (in this thread or task) against `budget`."""
    meter = Meter(budget)
    token = _METER.set(meter)
    try:
        yield meter
    finally:
        _METER.reset(token)


def _counted(iterable: Any) -> Any:
    """A loop's iterable, its items counted: a sized one's at once (a list of messages, a
    dict, a string: the loop runs on it as it is), a range's or an iterator's one by one."""
    meter = _METER.get()
    if meter is None:
        return iterable
    if isinstance(iterable, Sized) and not isinstance(iterable, range):
        meter.charge(len(iterable))  # (a loop that breaks early is charged it all)
        return iterable
    return meter.count(iterable)


class MeteredSandbox(ImmutableSandboxedEnvironment):
    """HF's sandbox, its renders counted in steps (the module's doc)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.filters[STEP_FILTER] = _counted

    def compile(
        self,
        source: str | nodes.Template,
        name: str | None = None,
        filename: str | None = None,
        raw: bool = False,
        defer_init: bool = False,
    ) -> Any:
        tree = self.parse(source, name, filename) if isinstance(source, str) else source
        for loop in tree.find_all(nodes.For):
            loop.iter = nodes.Filter(loop.iter, STEP_FILTER, [], [], None, None).set_lineno(
                loop.lineno
            )
        if raw:  # (two calls: `compile` is typed by overloads on `raw`)
            return super().compile(tree, name, filename, raw=True, defer_init=defer_init)
        return super().compile(tree, name, filename, raw=False, defer_init=defer_init)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        """The sandbox's `call` (its check, then the context's call: written out here, a
        `super()` call and its arguments' repacking cost a Qwen 3 render 7 %), counted."""
        meter = _METER.get()
        if meter is not None:
            if type(__obj) is not LoopContext:
                meter.charge(CALL_STEPS)
            else:  # a recursive loop's call: its iterable's items counted as a loop's are
                meter.charge(LOOP_CALL_STEPS)
                args = (_counted(args[0]), *args[1:]) if args else args
        if not __self.is_safe_callable(__obj):
            raise SecurityError(f"{__obj!r} is not safely callable")
        return __context.call(__obj, *args, **kwargs)
