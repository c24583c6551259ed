"""Hostile policy files: any bytes give a Policy or a PolicyError, never another exception.

Arbitrary YAML documents, valid policies (the documented full example and the built-in
default) mutated node by node, byte-level corruption, YAML features a policy never needs
(arbitrary tags, alias bombs, deep nesting, merge keys), and undecodable bytes.
"""

from __future__ import annotations

import copy
import random
import time
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kinference.config import Policy, PolicyError, decode_policy
from kinference.config.default import DEFAULT_POLICY_YAML
from tests.config.test_docs import full_example
from tests.hostile.test_request_fuzz import paths

KEYS = [
    "pools", "providers", "models", "tenants", "routing", "namespace", "name", "endpoints",
    "models", "engine", "api", "targets", "pool", "provider", "model", "use", "when",
    "aliases", "tenant", "qos", "tokens_per_minute", "weights", "prefix", "saturation",
    "default_tenant_action", "metrics_path", "base_url", "<<",
]  # fmt: skip
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**80), 2**80)
    | st.floats()
    | st.text(max_size=16)
    | st.sampled_from(["default/chat", "10.0.0.1:8000", "vllm", "overflow", "", "~", "a/b/c"])
)
yaml_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)
VALID = [full_example(), DEFAULT_POLICY_YAML]
VALID_DOCS = [yaml.safe_load(text) for text in VALID]


def load(data: bytes) -> Policy | None:
    """The loader's answer: a Policy, or None for a PolicyError; anything else fails."""
    try:
        return decode_policy(data, source="<fuzz>")
    except PolicyError as exc:
        assert "\n" not in str(exc), "a PolicyError is one line"
        return None


@settings(max_examples=100, deadline=None, database=None)
@given(yaml_values)
def test_arbitrary_yaml_documents(value: Any) -> None:
    load(yaml.safe_dump(value, allow_unicode=True).encode())


@settings(max_examples=150, deadline=None, database=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes(data: bytes) -> None:
    load(data)


def mutate(doc: Any, rng: random.Random, draw: Any) -> Any:
    doc = copy.deepcopy(doc)
    for _ in range(rng.choice([1, 1, 2, 4])):
        nodes = paths(doc)[1:]
        if not nodes:
            return draw(yaml_values)
        path = rng.choice(nodes)
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        action = rng.randrange(3)
        if action == 0:
            parent[path[-1]] = draw(yaml_values)
        elif action == 1:
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[rng.choice(KEYS)] = draw(yaml_values)
        else:
            parent.insert(rng.randrange(len(parent) + 1), draw(yaml_values))
    return doc


@settings(max_examples=80, deadline=None, database=None)
@given(st.sampled_from(VALID_DOCS), st.randoms(use_true_random=False), st.data())
def test_mutated_valid_policies(valid: Any, rng: random.Random, data: st.DataObject) -> None:
    doc = mutate(valid, rng, data.draw)
    load(yaml.safe_dump(doc, allow_unicode=True).encode())


@settings(max_examples=150, deadline=None, database=None)
@given(st.sampled_from(VALID), st.randoms(use_true_random=False))
def test_corrupted_policy_text(text: str, rng: random.Random) -> None:
    data = bytearray(text.encode())
    for _ in range(rng.choice([1, 2, 5])):
        at = rng.randrange(len(data) + 1)
        byte = rng.choice(b"{}[]:,-&*!|>'\"#%@` \t\n\x00\xff\xc3")
        if rng.randrange(2) and at < len(data):
            data[at] = byte
        else:
            data.insert(at, byte)
    load(bytes(data))


HOSTILE_DOCUMENTS = [
    b"!!python/object/apply:os.system ['true']",
    b"pools: !!python/name:os.system",
    b"pools: !custom {a: 1}",
    b"pools: !!binary AAAA",
    b"pools: !!set {a, b}",
    b"pools: !!timestamp 2001-12-14",
    b"a: &a [*a]",  # a recursive alias
    b"pools: " + b"[" * 10_000 + b"]" * 10_000,
    b"pools: " + b"{a: " * 5_000 + b"1" + b"}" * 5_000,
    b"- " * 5_000 + b"x",
    b"\xef\xbb\xbf\xef\xbb\xbfpools: []",  # two BOMs
    b"\xff\xfep\x00o\x00",  # UTF-16
    b"pools: []\n---\nmodels: []",  # two documents
    b"pools:\n  - <<: {namespace: a, name: b}\n    <<: {name: c}\n",
    b"? [a, b]\n: c",  # a complex key
    b"pools: [{namespace: default, name: p, endpoints: ['" + b"9" * 5_000 + b"']}]",
    b"tenants: [{tenant: t, tokens_per_minute: " + b"9" * 5_000 + b"}]",
    b"routing: {weights: {prefix: .nan, load: .inf}}",
    b"\x00",
    b"%YAML 9.9\n---\npools: []",
    b"%TAG ! tag:evil.example,2000:\n---\npools: !x []",
]


def test_hostile_documents() -> None:
    for data in HOSTILE_DOCUMENTS:
        load(data)


def test_an_alias_bomb_is_refused_quickly() -> None:
    """A billion-laughs document: nine levels of nine aliases (387 million leaves once
    expanded). It must be answered without walking every leaf."""
    lines = ['a0: &a0 ["lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    lines.append("pools: *a9")
    started = time.monotonic()
    assert load("\n".join(lines).encode()) is None
    assert time.monotonic() - started < 10.0  # an expansion would take hours
