"""A chat template that fails on a conversation fails as a `TemplateError` whatever it
raised: the Pick is routed approximately with the reason. Jinja's own errors were; a
template's arithmetic, a macro recursing without end or a range past the sandbox's bound
raised something else, which the preparer logged with a traceback at every such Pick."""

from __future__ import annotations

import pytest

from kinference.tokenize.template import ChatTemplate, TemplateError

MESSAGES = [{"role": "user", "content": "hi"}] * 2


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ("{{ 1 // (messages|length - 2) }}", "division"),
        ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "recursion"),
        ("{% for i in range(messages|length * 100000) %}{% endfor %}", "range"),
        ("{{ raise_exception('only one user message') }}", "only one"),
    ],
)
def test_whatever_a_template_raises_is_a_template_error(source: str, why: str) -> None:
    with pytest.raises(TemplateError, match="chat template failed") as caught:
        ChatTemplate(source).render(MESSAGES)
    assert why in str(caught.value).lower()
