"""The routing policy file: pools of model servers (later providers, models, tenants).

`load_policy(path)` reads and validates a file, `parse_policy(text)` validates YAML text,
`default_policy()` is the built-in example used without a file. Problems raise
`PolicyError`, one line naming the file, the line and the field.
"""

from kinference.config.default import default_policy
from kinference.config.loader import PolicyError, load_policy, parse_policy
from kinference.config.model import Policy, Pool

__all__ = ["Policy", "PolicyError", "Pool", "default_policy", "load_policy", "parse_policy"]
