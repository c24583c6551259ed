"""docs/configuration.md stays true: its examples validate and it names every key."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from kinference.config import Policy, parse_policy

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
_YAML_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.MULTILINE | re.DOTALL)


def yaml_blocks() -> list[str]:
    return _YAML_BLOCK.findall(DOC.read_text(encoding="utf-8"))


def full_example() -> str:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("\n## Full example\n", 1)[1]
    found = _YAML_BLOCK.search(section)
    assert found is not None
    return found.group(1)


def test_full_example_validates_and_uses_every_section() -> None:
    policy = parse_policy(full_example(), source="docs/configuration.md")
    assert [pool.ref for pool in policy.pools] == ["default/chat", "default/big"]
    assert [provider.ref for provider in policy.providers] == ["ai/openai", "ai/azure"]
    route = policy.resolve_model("llama3")
    assert route is not None and route.name == "llama-8b"
    assert [target.destination for target in route.targets] == [
        "default/chat",
        "default/big",
        "ai/openai",
    ]
    assert route.overflow[0].max_tokens_field == "max_completion_tokens"
    assert policy.tenant_rule("team-a") is policy.tenants[0]
    assert policy.tenant_rule("") is policy.tenants[2]
    assert policy.tenant_rule("someone") is policy.tenants[3]
    assert policy.default_tenant_action == "reject"
    # The example spells out the defaults of the tuning sections.
    assert policy.routing == Policy().routing
    assert policy.provider_health == Policy().provider_health


@pytest.mark.parametrize("index", range(len(yaml_blocks())))
def test_every_yaml_block_is_a_valid_policy(index: int, tmp_path: Path) -> None:
    text = yaml_blocks()[index]
    # Precise mode checks that its files exist: the example's paths are the user's.
    for path in re.findall(r"(?:tokenizer|chat_template): (/\S+)", text):
        stand_in = tmp_path / path.lstrip("/")
        stand_in.parent.mkdir(parents=True, exist_ok=True)
        stand_in.write_text("{}")
        text = text.replace(path, str(stand_in))
    parse_policy(text, source=f"docs/configuration.md block {index}")


def _models_in(annotation: object) -> list[type[BaseModel]]:
    """The pydantic models an annotation such as `tuple[Pool, ...] | None` refers to."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in typing.get_args(annotation) for model in _models_in(arg)]


def _keys(model: type[BaseModel]) -> set[str]:
    keys: set[str] = set()
    for name, field in model.model_fields.items():
        keys.add(name)
        for nested in _models_in(field.annotation):
            keys |= _keys(nested)
    return keys


def test_every_key_is_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    # A key is named on its own (`tenant`), or as part of a dotted key (`weights.prefix`).
    spellings = ("`{}`", ".{}`", "`{}.")
    missing = sorted(
        key
        for key in _keys(Policy)
        if not any(spelling.format(key) in text for spelling in spellings)
    )
    assert missing == []
