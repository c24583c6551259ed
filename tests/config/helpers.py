"""Shared helpers for the policy-file tests."""

from __future__ import annotations

import pytest

from kinference.config import PolicyError, parse_policy

# Two pools and two providers, prepended to texts that refer to them (lines 1-10).
BASE = """\
pools:
  - name: chat
    endpoints: ["10.0.0.5:8000"]
    models: [small, shared]
  - name: big
    endpoints: ["10.0.0.9:8000"]
    models: [large, shared]
providers:
  - {namespace: ai, name: openai, api: openai}
  - {namespace: ai, name: azure, api: azure-openai}
"""
BASE_LINES = BASE.count("\n")


def policy_error(text: str) -> str:
    """The one-line message `parse_policy` raises for `text` as file `policy.yaml`."""
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, source="policy.yaml")
    message = str(caught.value)
    assert "\n" not in message
    return message
