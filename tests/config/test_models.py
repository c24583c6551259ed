"""`models:` entries and targets: validation, cross-references by line, and resolution."""

from __future__ import annotations

import pytest

from kinference.config import Conditions, ModelRoute, Policy, Target, parse_policy
from tests.config.helpers import BASE, BASE_LINES, policy_error

ENTRIES = """\
models:
  - name: llama
    aliases: [llama3, shared-alias]
    targets:
      - {pool: default/big, model: large, when: {hint: large}}
      - {pool: default/chat, model: small}
      - provider: ai/openai
        model: gpt-4o-mini
        path: /v1/chat/completions?tier=fast
        use: overflow
        max_tokens_field: max_completion_tokens
"""


def test_entry_parses_with_its_defaults() -> None:
    entry = parse_policy(BASE + ENTRIES).models[0]
    assert entry.names == ("llama", "llama3", "shared-alias")
    hinted, small, provider = entry.targets
    assert hinted.when == Conditions(hint="large")
    assert (small.use, small.path, small.max_tokens_field) == ("primary", None, None)
    assert small.when == Conditions()
    assert (small.destination, small.is_provider) == ("default/chat", False)
    assert (provider.destination, provider.is_provider) == ("ai/openai", True)
    assert provider.path == "/v1/chat/completions?tier=fast"
    assert (provider.use, provider.max_tokens_field) == ("overflow", "max_completion_tokens")


def test_resolve_model_follows_aliases_to_one_route() -> None:
    policy = parse_policy(BASE + ENTRIES)
    route = policy.resolve_model("llama3")
    assert route is not None
    assert route is policy.resolve_model("llama") is policy.resolve_model("shared-alias")
    assert (route.name, route.aliases, route.implicit) == (
        "llama",
        ("llama3", "shared-alias"),
        False,
    )
    assert route.targets == policy.models[0].targets
    assert route.primary == route.targets[:2]
    assert route.overflow == route.targets[2:]
    assert route.names == ("llama", "llama3", "shared-alias")


def test_pool_models_are_routable_without_an_entry() -> None:
    policy = parse_policy(BASE)
    shared = policy.resolve_model("shared")
    assert shared == ModelRoute(
        name="shared",
        targets=(
            Target(pool="default/chat", model="shared"),
            Target(pool="default/big", model="shared"),
        ),
        implicit=True,
    )
    assert shared.primary == shared.targets and shared.overflow == ()
    assert policy.resolve_model("small") == ModelRoute(
        "small", (Target(pool="default/chat", model="small"),), implicit=True
    )
    assert policy.resolve_model("unknown") is None
    assert policy.model_names == ("small", "shared", "large")


def test_an_entry_wins_over_a_pool_model_of_the_same_name() -> None:
    text = (
        BASE
        + "models:\n  - {name: x, aliases: [small], targets: [{provider: ai/openai, model: m}]}\n"
    )
    route = parse_policy(text).resolve_model("small")
    assert route is not None
    assert (route.name, route.implicit) == ("x", False)


def test_resolution_is_built_once() -> None:
    policy = parse_policy(BASE + ENTRIES)
    assert policy.resolve_model("llama") is policy.resolve_model("llama")


def test_policy_built_in_code_resolves_too() -> None:
    policy = Policy.model_validate(
        {
            "pools": [{"name": "a", "endpoints": [], "models": ["m"]}],
            "models": [{"name": "n", "targets": [{"pool": "default/a", "model": "m"}]}],
        }
    )
    assert policy.resolve_model("n") is not None and policy.resolve_model("m") is not None


@pytest.mark.parametrize(
    ("conditions", "tokens", "tools", "hint", "expected"),
    [
        ({}, 0, False, None, True),
        ({"min_prompt_tokens": 100}, 99, False, None, False),
        ({"min_prompt_tokens": 100}, 100, False, None, True),
        ({"max_prompt_tokens": 100}, 100, False, None, True),
        ({"max_prompt_tokens": 100}, 101, False, None, False),
        ({"tools": True}, 0, False, None, False),
        ({"tools": True}, 0, True, None, True),
        ({"tools": False}, 0, True, None, False),
        ({"hint": "large"}, 0, False, None, False),
        ({"hint": "large"}, 0, False, "small", False),
        ({"hint": "large"}, 0, False, "large", True),
        ({}, 0, False, "large", True),
        ({"min_prompt_tokens": 10, "max_prompt_tokens": 20, "tools": True}, 15, True, None, True),
    ],
)
def test_conditions_match(
    conditions: dict[str, object], tokens: int, tools: bool, hint: str | None, expected: bool
) -> None:
    assert Conditions.model_validate(conditions).matches(tokens, tools, hint) is expected


def at(line: int) -> str:
    """`policy.yaml:N` for line N of the text after BASE."""
    return f"policy.yaml:{BASE_LINES + line}"


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        ("{model: m}", "models[0].targets[0]: a target names exactly one of 'pool' or 'provider'"),
        (
            "{pool: default/chat, provider: ai/openai, model: small}",
            "models[0].targets[0]: a target names exactly one",
        ),
        ("{pool: default/chat}", "models[0].targets[0].model: required key is missing"),
        ("{pool: chat, model: small}", "models[0].targets[0].pool: expected NAMESPACE/NAME"),
        ("{pool: default/Chat, model: small}", "models[0].targets[0].pool: expected a DNS name"),
        (
            "{provider: ai/openai, model: m, path: v1/chat}",
            "models[0].targets[0].path: expected a path starting with '/'",
        ),
        (
            "{provider: ai/openai, model: m, path: '/v1/chat#x'}",
            "models[0].targets[0].path: expected a path",
        ),
        (
            "{provider: ai/openai, model: m, use: fallback}",
            "models[0].targets[0].use: Input should be 'primary' or 'overflow'",
        ),
        (
            "{provider: ai/openai, model: m, max_tokens_field: max_output_tokens}",
            "models[0].targets[0].max_tokens_field: Input should be",
        ),
        (
            "{provider: ai/openai, model: m, when: {min_prompt_tokens: -1}}",
            "models[0].targets[0].when.min_prompt_tokens: Input should be greater than or equal",
        ),
        (
            "{provider: ai/openai, model: m, when: {hint: 'two words'}}",
            "models[0].targets[0].when.hint: expected letters, digits",
        ),
        (
            "{provider: ai/openai, model: m, when: {min_prompt_tokens: 9, max_prompt_tokens: 8}}",
            "models[0].targets[0].when.min_prompt_tokens: min_prompt_tokens (9) is greater",
        ),
        (
            "{provider: ai/openai, model: m, when: {prompt_tokens: 9}}",
            "models[0].targets[0].when.prompt_tokens: unknown key",
        ),
    ],
)
def test_invalid_target_is_named(target: str, problem: str) -> None:
    text = f"{BASE}models:\n  - name: x\n    targets:\n      - {target}\n"
    assert policy_error(text).startswith(f"{at(4)}: {problem}")


def test_path_on_a_pool_target_points_at_the_path() -> None:
    text = f"""{BASE}models:
  - name: x
    targets:
      - pool: default/chat
        model: small
        path: /v1/chat/completions
"""
    assert policy_error(text) == (
        f"{at(6)}: models[0].targets[0].path: path applies only to provider targets "
        "(a pool is sent the client's path)"
    )


def test_entry_needs_targets() -> None:
    text = f"{BASE}models:\n  - name: x\n    targets: []\n"
    assert policy_error(text) == f"{at(3)}: models[0].targets: at least one target is required"
    text = f"{BASE}models:\n  - name: x\n"
    assert policy_error(text) == f"{at(2)}: models[0].targets: required key is missing"


@pytest.mark.parametrize(
    ("aliases", "problem"),
    [
        ("[a, x]", "models[0].aliases[1]: alias 'x' repeats the model's name"),
        ("[a, b, a]", "models[0].aliases[2]: duplicate alias 'a' (first at index 0)"),
        ("[' a']", "models[0].aliases[0]: expected a model name"),
    ],
)
def test_invalid_aliases(aliases: str, problem: str) -> None:
    targets = "[{pool: default/chat, model: small}]"
    text = f"{BASE}models:\n  - name: x\n    aliases: {aliases}\n    targets: {targets}\n"
    assert policy_error(text).startswith(f"{at(3)}: {problem}")
