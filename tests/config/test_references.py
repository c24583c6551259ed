"""Names used across sections must be defined, and errors point at the line using them."""

from __future__ import annotations

from kinference.config import parse_policy
from tests.config.helpers import BASE, BASE_LINES, policy_error


def at(line: int) -> str:
    """`policy.yaml:N` for line N of the text after BASE."""
    return f"policy.yaml:{BASE_LINES + line}"


def test_unknown_pool_names_the_line_and_the_known_pools() -> None:
    text = f"""{BASE}models:
  - name: x
    targets:
      - {{pool: default/chat, model: small}}
      - pool: default/gpu
        model: small
"""
    assert policy_error(text) == (
        f"{at(5)}: models[0].targets[1].pool: unknown pool 'default/gpu' "
        "(pools: default/big, default/chat)"
    )


def test_unknown_provider_names_the_line() -> None:
    text = f"""{BASE}models:
  - name: x
    targets:
      - {{provider: ai/anthropic, model: claude}}
"""
    assert policy_error(text) == (
        f"{at(4)}: models[0].targets[0].provider: unknown provider 'ai/anthropic' "
        "(providers: ai/azure, ai/openai)"
    )


def test_unknown_reference_without_any_defined() -> None:
    text = "models:\n  - name: x\n    targets: [{pool: default/chat, model: m}]\n"
    assert policy_error(text) == (
        "policy.yaml:3: models[0].targets[0].pool: unknown pool 'default/chat' (no pools defined)"
    )


def test_pool_target_model_must_be_served_by_the_pool() -> None:
    text = f"""{BASE}models:
  - name: x
    targets:
      - pool: default/chat
        model: large
"""
    assert policy_error(text) == (
        f"{at(5)}: models[0].targets[0].model: pool default/chat does not serve model 'large' "
        "(it serves: shared, small)"
    )


def test_provider_target_model_is_free() -> None:
    text = f"{BASE}models:\n  - {{name: x, targets: [{{provider: ai/openai, model: anything}}]}}\n"
    assert parse_policy(text).models[0].targets[0].model == "anything"


def test_names_are_unique_across_entries() -> None:
    text = f"""{BASE}models:
  - name: a
    aliases: [b]
    targets: [{{pool: default/chat, model: small}}]
  - name: c
    aliases: [d, b]
    targets: [{{pool: default/chat, model: small}}]
  - name: a
    targets: [{{pool: default/chat, model: small}}]
"""
    message = policy_error(text)
    assert message == (
        f"{at(6)}: models[1].aliases[1]: model name 'b' is already used by models[0] "
        "(and 1 more problem(s))"
    )


def test_duplicate_entry_name_points_at_the_name() -> None:
    text = f"""{BASE}models:
  - {{name: a, targets: [{{pool: default/chat, model: small}}]}}
  - name: a
    targets: [{{pool: default/chat, model: small}}]
"""
    assert policy_error(text) == (
        f"{at(3)}: models[1].name: model name 'a' is already used by models[0]"
    )


def test_cross_reference_errors_are_reported_in_line_order() -> None:
    text = f"""{BASE}tenants:
  - {{tenant: a, models: [nothing]}}
models:
  - name: x
    targets:
      - {{pool: default/none, model: small}}
"""
    # The tenant problem is checked last but sits on an earlier line.
    assert policy_error(text) == (
        f"{at(2)}: tenants[0].models[0]: unknown model 'nothing': not a name or alias under "
        "'models', nor a model any pool serves (and 1 more problem(s))"
    )


def test_a_provider_target_may_name_another_api_only_with_its_own_path() -> None:
    text = f"""{BASE}models:
  - name: x
    targets:
      - {{provider: ai/openai, model: gpt, api: anthropic}}
"""
    assert policy_error(text) == (
        f"{at(4)}: models[0].targets[0].api: api 'anthropic' differs from provider "
        "ai/openai's (api: openai); give the target a 'path' that speaks it"
    )
    ok = f"""{BASE}models:
  - name: x
    targets:
      - {{provider: ai/openai, model: gpt, api: anthropic, path: /anthropic/v1/messages}}
      - {{pool: default/chat, model: small, api: anthropic}}
"""
    targets = parse_policy(ok).models[0].targets
    assert [target.api for target in targets] == ["anthropic", "anthropic"]


def test_target_api_is_validated() -> None:
    text = f"""{BASE}models:
  - name: x
    targets:
      - {{pool: default/chat, model: small, api: gemini}}
"""
    assert "api" in policy_error(text)
