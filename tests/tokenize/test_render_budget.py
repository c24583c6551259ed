"""A chat template's render is bounded in work (`kinference.tokenize.render_budget`): a
template that loops without end in practice (numbers in nested ranges, a macro calling
itself twice, the messages inside the messages) fails with `RenderBudgetExceeded` (a
`TemplateError`: the Pick is routed approximately with the reason) instead of holding the
tokenizer thread for every later Pick of its pool; real templates stay far from it."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from kinference.tokenize.render_budget import budget_for, metered
from kinference.tokenize.template import (
    MAX_MESSAGES,
    ChatTemplate,
    RenderBudgetExceeded,
    TemplateError,
)
from kinference.tokenize.tokenizer import PromptText, PromptTokenizer, Untokenizable
from tests.tokenize.files import TEMPLATE, write_model
from tests.tokenize.test_stand_in import LLAMA3, PLACING, SPECIAL, TRIMMING

# Each finite, but 10-1000x their budget: seconds on main (the real ones: without end).
ENDLESS = {
    "nested ranges": "{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
    "doubling macro": (
        "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(18) }}"
    ),
    "messages cubed": (
        "{% for a in messages %}{% for b in messages %}{% for c in messages %}"
        "{% endfor %}{% endfor %}{% endfor %}"
    ),
    "recursive loop": (
        "{% for m in [1, 2] recursive %}{{ loop([1, 2]) if loop.depth < 17 }}{% endfor %}"
    ),
    # Few calls, each over many items: the items of a recursive call's iterable count too
    # (its calls alone: 20 x LOOP_CALL_STEPS; 4,096 messages over themselves took 50 s).
    "recursive loop's items": (
        "{% for m in range(20) recursive %}{{ loop(range(100000)) if loop.depth < 2 }}{% endfor %}"
    ),
}


def _messages(count: int, long: bool = False) -> list[dict[str, str]]:
    rng = random.Random(count)
    words = ["the", "quick", "brown", "fox", "</think>", "é", "日本", "\n"]
    return [
        {
            "role": "system" if i == 0 else ("user", "assistant")[i % 2],
            "content": " ".join(rng.choice(words) for _ in range(600 if long else 12)),
        }
        for i in range(count)
    ]


@pytest.mark.parametrize("name", list(ENDLESS))
def test_a_template_that_loops_without_end_fails_with_its_reason(name: str) -> None:
    template = ChatTemplate(ENDLESS[name])
    with pytest.raises(RenderBudgetExceeded, match="steps") as caught:
        template.render(_messages(100))
    assert isinstance(caught.value, TemplateError)
    assert str(budget_for(100)) in str(caught.value)


def test_a_long_conversation_stood_in_fails_once_not_twice() -> None:
    """The stand-in render (long strings) reaching the budget is not rendered again whole."""
    source = "{% for m in messages %}{{ m.content }}{% endfor %}" + ENDLESS["nested ranges"]
    template = ChatTemplate(source, stand_in_chars=64)
    with pytest.raises(RenderBudgetExceeded):
        template.render(_messages(3, long=True))


@pytest.mark.parametrize("name", ["chatml", "llama3", *TRIMMING, *PLACING])
def test_real_templates_stay_far_from_the_budget(name: str) -> None:
    """At the message limit and with a long system prompt, each takes at most an eighth of
    its budget (the docstring's `steps per message` figures)."""
    source = {"chatml": TEMPLATE, "llama3": LLAMA3, **TRIMMING, **PLACING}[name]
    template = ChatTemplate(source, SPECIAL)
    messages = _messages(MAX_MESSAGES)
    with metered(budget_for(len(messages))) as meter:
        template._template.render(messages=messages, add_generation_prompt=True, **SPECIAL)
    assert meter.budget - meter.left <= meter.budget // 8
    assert template.render(messages)  # and through `render`, within the budget


def test_the_tokenizer_thread_is_freed_with_the_reason(tmp_path: Path) -> None:
    tokenizer_json, _ = write_model(tmp_path)
    tokenizer = PromptTokenizer(
        Tokenizer.from_file(str(tokenizer_json)), ChatTemplate(ENDLESS["doubling macro"]), 4
    )
    with pytest.raises(Untokenizable, match=r"more than .* steps"):
        tokenizer.blocks(PromptText(messages=_messages(2)))
