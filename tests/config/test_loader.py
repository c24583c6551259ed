"""The routing policy file: valid shapes, and errors that name the file, line and field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from kinference.config import (
    Policy,
    PolicyError,
    Pool,
    default_policy,
    load_policy,
    parse_policy,
)
from tests.config.helpers import policy_error

EXAMPLE = """\
pools:
  - namespace: default
    name: chat
    endpoints: ["10.0.0.5:8000", "10.0.0.6:8000"]
    models: ["meta-llama/Llama-3.1-8B-Instruct"]
"""


def test_example_policy_parses() -> None:
    policy = parse_policy(EXAMPLE)
    assert policy == Policy(
        pools=(
            Pool(
                namespace="default",
                name="chat",
                endpoints=("10.0.0.5:8000", "10.0.0.6:8000"),
                models=("meta-llama/Llama-3.1-8B-Instruct",),
            ),
        )
    )
    assert policy.pools[0].ref == "default/chat"


def test_namespace_defaults_and_endpoints_may_be_empty() -> None:
    policy = parse_policy("pools:\n  - name: idle\n    endpoints: []\n    models: [m]\n")
    assert policy.pools[0].ref == "default/idle"
    assert policy.pools[0].endpoints == ()


def test_ipv6_and_hostname_endpoints() -> None:
    text = """\
pools:
  - name: a
    endpoints: ['[fd00::5]:8000', vllm-0.vllm:8000]
    models: [m]
"""
    assert parse_policy(text).pools[0].endpoints == ("[fd00::5]:8000", "vllm-0.vllm:8000")


def test_bad_endpoint_names_file_line_and_field() -> None:
    text = """\
# Routing policy for the chat pool.

pools:
  - name: chat
    endpoints:
      - 10.0.0.5:8000
      - 10.0.0.5
    models: [m]
"""
    assert policy_error(text) == (
        "policy.yaml:7: pools[0].endpoints[1]: expected HOST:PORT, got '10.0.0.5'"
    )


def test_endpoint_port_zero_is_rejected() -> None:
    text = "pools:\n  - name: a\n    endpoints: ['h:0']\n    models: [m]\n"
    assert policy_error(text).startswith("policy.yaml:3: pools[0].endpoints[0]: endpoint port")


def test_duplicate_endpoint_points_at_the_second_one() -> None:
    text = """\
pools:
  - name: a
    endpoints:
      - h:1
      - g:1
      - h:1
    models: [m]
"""
    message = policy_error(text)
    assert message.startswith("policy.yaml:6: pools[0].endpoints[2]: duplicate endpoint 'h:1'")
    assert "first at index 0" in message


def test_duplicate_pool_points_at_the_second_one() -> None:
    text = """\
pools:
  - name: chat
    endpoints: []
    models: [m]
  - namespace: default
    name: chat
    endpoints: []
    models: [n]
"""
    message = policy_error(text)
    assert message.startswith("policy.yaml:6: pools[1].name: duplicate pool 'default/chat'")


def test_same_name_in_other_namespace_is_a_different_pool() -> None:
    text = """\
pools:
  - {namespace: team-a, name: chat, endpoints: [], models: [m]}
  - {namespace: team-b, name: chat, endpoints: [], models: [m]}
"""
    assert [pool.ref for pool in parse_policy(text).pools] == ["team-a/chat", "team-b/chat"]


def test_unknown_key_is_an_error() -> None:
    text = "pools:\n  - name: a\n    endpoints: []\n    modles: [m]\n    models: [m]\n"
    assert policy_error(text) == "policy.yaml:4: pools[0].modles: unknown key"


def test_unknown_top_level_key_is_an_error() -> None:
    assert (
        policy_error("pools: []\ntenants_typo: {}\n") == "policy.yaml:2: tenants_typo: unknown key"
    )


def test_missing_key_points_at_its_pool() -> None:
    text = "pools:\n  - name: a\n    endpoints: []\n"
    assert policy_error(text) == "policy.yaml:2: pools[0].models: required key is missing"


@pytest.mark.parametrize(
    ("pool", "problem"),
    [
        ("{name: '', endpoints: [], models: [m]}", "pools[0].name: expected a DNS name"),
        ("{name: Chat, endpoints: [], models: [m]}", "pools[0].name: expected a DNS name"),
        ("{namespace: a.b, name: c, endpoints: [], models: [m]}", "pools[0].namespace: expected"),
        ("{name: a, endpoints: [], models: []}", "pools[0].models: at least one model"),
        ("{name: a, endpoints: [], models: ['']}", "pools[0].models[0]: expected a model name"),
        ("{name: a, endpoints: [], models: [m, m]}", "pools[0].models[1]: duplicate model 'm'"),
        ("{name: a, endpoints: [], models: [1.5]}", "pools[0].models[0]: Input should be"),
        ("{name: a, endpoints: h:1, models: [m]}", "pools[0].endpoints: Input should be"),
        ("chat", "pools[0]: Input should be a valid dictionary"),
    ],
)
def test_invalid_pool_field_is_named(pool: str, problem: str) -> None:
    assert policy_error(f"\npools:\n  - {pool}\n").startswith(f"policy.yaml:3: {problem}")


def test_typo_is_reported_before_the_key_it_leaves_missing() -> None:
    message = policy_error("pools:\n  - nme: a\n    endpoints: []\n    models: [m]\n")
    assert message == "policy.yaml:2: pools[0].nme: unknown key (and 1 more problem(s))"


def test_several_problems_report_the_first_line_and_a_count() -> None:
    text = "pools:\n  - name: a\n    endpoints: [x]\n    models: []\n"
    message = policy_error(text)
    assert message.startswith("policy.yaml:3: pools[0].endpoints[0]: ")
    assert message.endswith("(and 1 more problem(s))")


def test_duplicate_yaml_key_is_an_error() -> None:
    text = "pools:\n  - name: a\n    name: b\n    endpoints: []\n    models: [m]\n"
    assert policy_error(text) == "policy.yaml:3: pools[0].name: duplicate key"


def test_yaml_syntax_error_names_the_line() -> None:
    text = "pools:\n  - name: a\n    endpoints: [h:1]\n    models: [m\n  - name: b\n"
    message = policy_error(text)
    assert message.startswith("policy.yaml:5: invalid YAML: ")
    assert "flow sequence at line 4" in message


def test_tab_indentation_is_a_syntax_error() -> None:
    assert policy_error("pools:\n\t- name: a\n").startswith("policy.yaml:2: invalid YAML: ")


def test_control_character_is_a_syntax_error() -> None:
    assert policy_error("pools: []\nx: \x07\n").startswith("policy.yaml:2: invalid YAML: ")


def test_multiple_documents_are_an_error() -> None:
    assert policy_error("pools: []\n---\npools: []\n").startswith("policy.yaml:2: invalid YAML: ")


def test_python_tags_are_refused() -> None:
    message = policy_error("pools: !!python/object/apply:os.system ['true']\n")
    assert message.startswith("policy.yaml:1: invalid YAML: could not determine a constructor")


@pytest.mark.parametrize("text", ["", "\n", "# no pools yet\n", "---\n", "~\n"])
def test_empty_file_is_an_empty_policy(text: str) -> None:
    assert parse_policy(text) == Policy()


@pytest.mark.parametrize(("text", "got"), [("- a\n", "['a']"), ("pools\n", "'pools'")])
def test_top_level_must_be_a_mapping(text: str, got: str) -> None:
    assert policy_error(text) == (
        f"policy.yaml:1: expected a mapping at the top level (e.g. 'pools:'), got {got}"
    )


def test_load_policy_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(EXAMPLE, encoding="utf-8")
    assert load_policy(path) == parse_policy(EXAMPLE)


def test_load_policy_names_the_file_in_errors(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("pools:\n  - nme: a\n    endpoints: []\n    models: [m]\n", encoding="utf-8")
    with pytest.raises(
        PolicyError, match=rf"^{re.escape(str(path))}:2: pools\[0\]\.nme: unknown key"
    ):
        load_policy(path)


def test_load_policy_tolerates_a_byte_order_mark(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + EXAMPLE.encode())
    assert load_policy(path) == parse_policy(EXAMPLE)


def test_missing_file_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(PolicyError, match=rf"^{re.escape(str(path))}: cannot read: No such file"):
        load_policy(path)


def test_directory_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match=rf"^{re.escape(str(tmp_path))}: cannot read: "):
        load_policy(tmp_path)


def test_non_utf8_file_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_bytes(b"pools: []\n# caf\xe9\n")
    with pytest.raises(PolicyError, match=rf"^{re.escape(str(path))}: not UTF-8 text"):
        load_policy(path)


def test_default_policy_is_valid() -> None:
    policy = default_policy()
    assert [pool.ref for pool in policy.pools] == ["default/chat"]
    assert policy.pools[0].endpoints == ("127.0.0.1:8000", "127.0.0.1:8001")
    assert policy.pools[0].models == ("meta-llama/Llama-3.1-8B-Instruct",)


def test_models_are_frozen_and_validate_when_built_in_code() -> None:
    pool = default_policy().pools[0]
    with pytest.raises(ValidationError):
        pool.name = "other"
    with pytest.raises(ValidationError, match="duplicate pool"):
        Policy(pools=(pool, pool))
