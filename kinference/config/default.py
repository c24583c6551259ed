"""The built-in policy used when `serve` runs without a policy file.

It matches the README's quick start: two local model servers on ports 8000 and 8001. It is
written as policy YAML and parsed like any file, so it can never bypass validation and
doubles as an example of the format.
"""

from __future__ import annotations

from kinference.config.loader import parse_policy
from kinference.config.policy import Policy

DEFAULT_POLICY_YAML = """\
pools:
  - namespace: default
    name: chat
    endpoints: ["127.0.0.1:8000", "127.0.0.1:8001"]
    models: ["meta-llama/Llama-3.1-8B-Instruct"]
"""


def default_policy() -> Policy:
    """The built-in example policy: pool `default/chat` on two local model servers."""
    return parse_policy(DEFAULT_POLICY_YAML, source="<default policy>")
