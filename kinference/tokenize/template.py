"""Chat requests rendered to prompt text the way Hugging Face's `apply_chat_template` does.

The environment is HF's: a sandboxed, immutable Jinja environment with `trim_blocks` and
`lstrip_blocks`, the `loopcontrols` extension, a `tojson` filter that keeps non-ASCII text,
and the `raise_exception` and `strftime_now` globals; the template is given `messages`,
`tools`, `add_generation_prompt=True` and the special tokens named in tokenizer_config.json.
Content given as a list of text parts is joined with newlines first, as vLLM does for
templates that expect a string. A conversation holding a string of `STAND_IN_CHARS` or more
is rendered with it stood in for first (`stand_in`: the long text is copied once, into the
output, where the whole render copies it three or four times holding the GIL); where the
template does more with it than place it, or fails, the whole render decides.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import jinja2
import jinja2.ext

from kinference.tokenize.render_budget import Exhausted, MeteredSandbox, budget_for, metered
from kinference.tokenize.stand_in import (
    STAND_IN_CHARS,
    StandInEnvironment,
    Touched,
    gathers,
    holds_long,
    rendered,
    stand_in,
)
from kinference.tokenize.stand_in_trim import trim_filter

E = TypeVar("E", bound=MeteredSandbox)
_SPECIAL_KEYS = ("bos_token", "eos_token", "pad_token", "unk_token")
# Rendering is a Python loop per message (~10 µs each): more than this many messages are
# not rendered (the Pick uses the approximate index), so a render stays within ~50 ms.
MAX_MESSAGES = 4096


class TemplateError(ValueError):
    """The template could not be loaded or could not render this conversation."""


class RenderBudgetExceeded(TemplateError):
    """The render took more steps (loop iterations, calls) than its budget allows
    (`render_budget`): a template that loops without end in practice."""


class ChatTemplate:
    """A compiled chat template and the special tokens it may refer to."""

    def __init__(
        self,
        source: str,
        special: dict[str, str] | None = None,
        stand_in_chars: int = STAND_IN_CHARS,
    ) -> None:
        try:
            self._template = _environment(MeteredSandbox).from_string(source)
        except jinja2.TemplateError as exc:
            raise TemplateError(f"chat template does not compile: {exc}") from None
        guarded = _environment(StandInEnvironment)
        guarded.guard()
        guarded.filters["trim"] = trim_filter(guarded.filters["trim"])  # Llama 3's contents
        # None: the template gathers output into values (`stand_in.gathers`): always whole.
        self._standing_in = None if gathers(guarded, source) else guarded.from_string(source)
        self.special = dict(special or {})
        self.stand_in_chars = stand_in_chars
        self.stood_in = 0  # renders done with stand-ins (tests, benchmarks)

    @classmethod
    def from_file(cls, path: str) -> ChatTemplate:
        """A Jinja file, or a tokenizer_config.json (its `chat_template` and special tokens)."""
        text = Path(path).read_text(encoding="utf-8")
        if not path.endswith(".json"):
            return cls(text)
        try:
            config = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TemplateError(f"{path}: not JSON: {exc}") from None
        source = config.get("chat_template") if isinstance(config, dict) else None
        if isinstance(source, list):  # named templates: the default one
            named = {t.get("name"): t.get("template") for t in source if isinstance(t, dict)}
            source = named.get("default")
        if not isinstance(source, str):
            raise TemplateError(f"{path} has no chat_template")
        return cls(source, {k: v for k in _SPECIAL_KEYS if isinstance(v := _token(config, k), str)})

    def render(self, messages: list[Any], tools: list[Any] | None = None) -> str:
        if not isinstance(messages, list):
            raise TemplateError("messages is not an array")
        if len(messages) > MAX_MESSAGES:
            raise TemplateError(f"more than {MAX_MESSAGES} messages")
        flat = [_flatten(m) for m in messages]
        budget = budget_for(len(flat))
        try:
            if self._standing_in is not None and holds_long([flat, tools], self.stand_in_chars):
                with metered(budget):
                    text = self._stood_in(flat, tools)
                if text is not None:
                    return text
            with metered(budget):
                return self._template.render(
                    messages=flat, tools=tools, add_generation_prompt=True, **self.special
                )
        except Exhausted:
            raise RenderBudgetExceeded(
                f"chat template took more than {budget} steps (loop iterations and calls) "
                f"for {len(flat)} messages"
            ) from None
        except Exception as exc:  # the template's (Jinja's, its arithmetic, its recursion)
            raise TemplateError(f"chat template failed: {exc}") from None

    def _stood_in(self, messages: list[Any], tools: list[Any] | None) -> str | None:
        """The render with long strings stood in for, or None: the whole render decides
        (the template did more than place them, or failed)."""
        template = self._standing_in
        assert template is not None
        least = self.stand_in_chars
        variables = {"messages": stand_in(messages, least), "tools": stand_in(tools, least)}
        context = template.new_context({**variables, "add_generation_prompt": True, **self.special})
        try:
            text = rendered(template.root_render_func(context))
        except Touched:
            return None
        except Exception:  # its error (or none: a stand-in's fault) comes from the whole render
            return None
        self.stood_in += 1
        return text


def _environment(kind: type[E]) -> E:
    environment = kind(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    environment.filters["tojson"] = _tojson
    environment.globals["raise_exception"] = _raise
    environment.globals["strftime_now"] = _strftime_now
    return environment


def _token(config: dict[str, Any], key: str) -> Any:
    value = config.get(key)
    return value.get("content") if isinstance(value, dict) else value  # AddedToken form


def _flatten(message: Any) -> Any:
    if not isinstance(message, dict):
        return message
    content = message.get("content")
    if not isinstance(content, list):
        return message
    texts = [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
    return {**message, "content": "\n".join(t for t in texts if isinstance(t, str))}


def _tojson(
    value: Any, ensure_ascii: bool = False, indent: int | None = None, sort_keys: bool = False
) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, sort_keys=sort_keys)


def _raise(message: str) -> None:
    raise jinja2.TemplateError(message)


def _strftime_now(pattern: str) -> str:
    return datetime.now().strftime(pattern)
