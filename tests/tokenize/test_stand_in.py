"""A conversation's long strings stood in for while its template renders (`stand_in`): the
text, and so the precise prompt tokens, equal the whole render's for every template, and
templates that do more with a long string than place it fall back to the whole render."""

from __future__ import annotations

import random
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer

from kinference.tokenize.template import ChatTemplate, TemplateError
from kinference.tokenize.tokenizer import PromptText, PromptTokenizer
from tests.tokenize.files import TEMPLATE, WORDS, write_model

LONG = 64  # strings this long are stood in for here
SPECIAL = {"bos_token": "<s>", "eos_token": "<|im_end|>"}

LLAMA3 = (
    "{{- bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}"
)
# Llama 3.1's system message, trimmed into a variable; and `trim` given its characters.
TRIMMING = {
    "llama3": LLAMA3,
    "llama31-system": (
        "{%- set system_message = messages[0]['content']|trim %}"
        "{{ '<|start_header_id|>system<|end_header_id|>\\n\\n' + system_message }}"
        "{% for message in messages[1:] %}{{ message.role + ': ' + message.content|trim }}"
        "{% endfor %}"
    ),
    "trim-chars": "{% for m in messages %}{{ m.content|trim(' \\nx') + '|' }}{% endfor %}",
}
# Qwen 3's template, abridged: the last query's index, `startswith`, `in`, `split`, `lstrip`.
QWEN3 = """
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and
          not(message.content.startswith('<tool_response>') and
              message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}{%- set content = message.content %}
    {%- else %}{%- set content = '' %}{%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "system" %}
        {{- '<|im_start|>system\\n' + content + '<|im_end|>\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if '</think>' in content %}
            {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index and (loop.last or reasoning_content) %}
            {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n')
                + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""
# Each does something with a long content that a stand-in cannot answer exactly.
TOUCHING = {
    "slice": "{% for m in messages %}{{ m.content[:3] }}{{ m.content }}{% endfor %}",
    "tilde": "{% for m in messages %}{{ m.content ~ '!' }}{% endfor %}",
    "upper": "{% for m in messages %}{{ m.content|upper }}{% endfor %}",
    "tojson": "{{ messages|tojson }}",
    "str-join": "{{ '\\n'.join(messages|map(attribute='content')) }}",
    "join-length": "{{ ('\\n'.join(messages|map(attribute='content')))|length }}",
    "join-filter": "{{ messages|map(attribute='content')|join('|') }}",
    "list-repr": "{{ messages }}",
    "format": "{% for m in messages %}{{ '%s!'|format(m.content) }}{% endfor %}",
    "macro": (
        "{% macro show(m) %}[{{ m.content }}]{% endmacro %}"
        "{% for m in messages %}{{ show(m)|length }}{{ show(m) }}{% endfor %}"
    ),
    "block-set": (
        "{% for m in messages %}{% set shown %}{{ m.content }}{% endset %}"
        "{{ shown|length }}:{{ shown }}{% endfor %}"
    ),
    "wordcount": "{% for m in messages %}{{ m.content|wordcount }}{{ m.content }}{% endfor %}",
    "hash": "{{ messages|map(attribute='content')|unique|list|length }}",
    "trim-concat": "{% for m in messages %}{{ (m.content + ' ')|trim }}{% endfor %}",
    "raise": (
        "{% for m in messages %}{% if m.content|length > 70 %}"
        "{{ raise_exception('too long: ' + m.content) }}{% endif %}{{ m.content }}{% endfor %}"
    ),
}
# Each only places long contents or asks what stand-ins answer exactly.
PLACING = {
    "chatml": TEMPLATE,
    "qwen3": QWEN3,
    "asks": (
        "{% for m in messages %}{% if m.content %}{{ m.content|length }}{% endif %}"
        "{% if 'fox' in m.content %}F{% endif %}{% if m.content.startswith('the') %}T{% endif %}"
        "{% if m.content == messages[0].content %}={% endif %}{{ m['content'] }}"
        "{% if loop.last %}{{ '<|im_start|>' ~ m.role }}{% endif %}{% endfor %}"
    ),
    "namespace": (
        "{% set ns = namespace(text='') %}{% for m in messages %}"
        "{% set ns.text = ns.text + m.content + '|' %}{% endfor %}{{ ns.text }}"
    ),
}


def _text(rng: random.Random, longest: int) -> str:
    chars = rng.choice([rng.randint(0, 40), rng.randint(LONG - 2, longest)])
    parts = [rng.choice([*WORDS, "</think>", "  ", "\n", "é", "日本", "<tool_response>"])]
    while sum(map(len, parts)) < chars:
        parts.append(rng.choice([*WORDS, " ", " ", "\n", "</think>", "日本"]))
    text = "".join(parts)[:chars]
    return rng.choice([text, f"  {text}\n", "<tool_response>" + text + "</tool_response>"])


def _conversation(rng: random.Random, turns: int) -> list[list[dict[str, Any]]]:
    """Each turn's messages: a system prompt, users and assistants, edits of earlier ones."""
    history: list[dict[str, Any]] = [{"role": "system", "content": _text(rng, 400)}]
    result = []
    for _ in range(turns):
        history = [*history, {"role": "user", "content": _text(rng, 300)}]
        if rng.random() < 0.2:  # an edit of an earlier message
            at = rng.randrange(len(history))
            history[at] = {**history[at], "content": _text(rng, 300)}
        result.append(history)
        history = [*history, {"role": "assistant", "content": _text(rng, 300)}]
    return result


def _both(source: str, messages: list[Any]) -> tuple[str | Exception, str | Exception, int]:
    """The render with stand-ins, the whole one's, and how many renders stood in."""
    outcomes: list[str | Exception] = []
    stood = 0
    for least in (LONG, 1 << 40):
        template = ChatTemplate(source, SPECIAL, stand_in_chars=least)
        try:
            outcomes.append(template.render(messages))
        except TemplateError as exc:
            outcomes.append(exc)
        stood += template.stood_in
    return outcomes[0], outcomes[1], stood


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("name", sorted({**PLACING, **TOUCHING, **TRIMMING}))
def test_renders_equal_the_whole_render(name: str, seed: int) -> None:
    source = {**PLACING, **TOUCHING, **TRIMMING}[name]
    rng = random.Random(f"{name}-{seed}")
    for messages in _conversation(rng, 4):
        stood, whole, _ = _both(source, messages)
        assert type(stood) is type(whole)
        assert str(stood) == str(whole)


@pytest.mark.parametrize("name", sorted(PLACING))
def test_templates_that_place_long_contents_stand_in(name: str) -> None:
    long = "the fox " * 20
    messages = [
        {"role": "system", "content": long},
        {"role": "user", "content": "hello " + long},
        {"role": "assistant", "content": "hi"},
        {
            "role": "user",
            "content": [{"type": "text", "text": long}, {"type": "text", "text": "x"}],
        },
    ]
    stood, whole, count = _both(PLACING[name], messages)
    assert stood == whole and count == 1


@pytest.mark.parametrize("name", sorted(TRIMMING))
@pytest.mark.parametrize(
    "content",
    ["the fox " * 20, "the fox" * 20, "  \n" + "the fox" * 20 + "\n\n", " " * 100 + "x" * 70],
)
def test_templates_that_trim_long_contents_stand_in(name: str, content: str) -> None:
    """Nothing to strip, whitespace at either end, and a run past the ends the filter reads."""
    messages = [{"role": "system", "content": content}, {"role": "user", "content": content}]
    stood, whole, count = _both(TRIMMING[name], messages)
    assert stood == whole and count == 1


@pytest.mark.parametrize("name", sorted(TRIMMING))
def test_a_long_content_trimmed_to_nothing_renders_as_the_whole(name: str) -> None:
    messages = [{"role": "system", "content": " \n" * 100}, {"role": "user", "content": "x"}]
    stood, whole, count = _both(TRIMMING[name], messages)
    assert stood == whole and count == 1


@pytest.mark.parametrize("name", sorted(TOUCHING))
def test_templates_that_touch_long_contents_render_whole(name: str) -> None:
    source = TOUCHING[name]
    messages = [{"role": "system", "content": "the fox " * 20}, {"role": "user", "content": "hi"}]
    stood, whole, count = _both(source, messages)
    assert str(stood) == str(whole) and count == 0


def test_short_conversations_are_rendered_whole() -> None:
    template = ChatTemplate(TEMPLATE, SPECIAL, stand_in_chars=LONG)
    template.render([{"role": "user", "content": "x" * (LONG - 1)}])
    assert template.stood_in == 0


def _render_peak(source: str, content: str) -> tuple[str, int, int]:
    """A long system content and a short user message rendered by `source` (default stand-in
    length): the text, tracemalloc's peak during the render, and the renders stood in."""
    messages = [{"role": "system", "content": content}, {"role": "user", "content": "hi"}]
    template = ChatTemplate(source, SPECIAL)
    tracemalloc.start()
    try:
        text = template.render(messages)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return text, peak, template.stood_in


def test_a_long_render_copies_its_long_content_once() -> None:
    """The whole render of a ChatML template copies a long content three times before the
    output's join (its `+` chain); with a stand-in only the output holds it."""
    content = "the quick brown fox " * 100_000  # 2 MB
    text, peak, _ = _render_peak(TEMPLATE, content)
    assert content in text and peak < 1.5 * len(content)


def test_a_trimmed_long_content_is_copied_once() -> None:
    """Llama 3 trims every content before its `+` chain: rendered whole, a 2 MB content is
    copied there three times more; stood in (nothing to strip), only the output holds it."""
    content = "the quick brown fox " * 100_000 + "end"
    text, peak, stood = _render_peak(LLAMA3, content)
    assert content in text and peak < 1.5 * len(content) and stood == 1


def test_precise_tokens_equal_the_whole_renders(tmp_path: Path) -> None:
    files = write_model(tmp_path)
    raw = Tokenizer.from_file(str(files[0]))
    rng = random.Random(7)
    for source in (TEMPLATE, QWEN3, LLAMA3):
        stood = PromptTokenizer(raw, ChatTemplate(source, SPECIAL, stand_in_chars=LONG), 4)
        whole = PromptTokenizer(raw, ChatTemplate(source, SPECIAL, stand_in_chars=1 << 40), 4)
        for messages in _conversation(rng, 5):
            text = PromptText(messages=messages)
            assert stood.token_ids(text).tolist() == whole.token_ids(text).tolist()
