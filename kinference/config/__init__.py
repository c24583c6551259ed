"""The routing policy file: pools, providers, models, tenants, routing and health tuning.

`load_policy(path)` reads and validates a file, `parse_policy(text)` validates YAML text,
`default_policy()` is the built-in example used without a file, and `PolicyWatcher`
reloads a file when it changes. Problems raise `PolicyError`, one line naming the file,
the line and the field. docs/configuration.md describes every key.
"""

from kinference.config.default import default_policy
from kinference.config.index import ModelRoute
from kinference.config.loader import PolicyError, decode_policy, load_policy, parse_policy
from kinference.config.models import Conditions, ModelEntry, Target
from kinference.config.paths import (
    ShapeKind,
    UnsupportedShape,
    provider_path,
    supports_shape,
    target_api,
)
from kinference.config.policy import Policy
from kinference.config.pools import DEFAULT_AZURE_API_VERSION, Engine, Pool, Provider, ProviderApi
from kinference.config.prefix import PrefixConfig, PrefixMode, address_for
from kinference.config.routing import (
    Cooldowns,
    EngineMetricsSettings,
    ProviderHealthSettings,
    RoutingSettings,
    Weights,
)
from kinference.config.tenants import QosClass, TenantAction, TenantRule
from kinference.config.watch import PolicyWatcher

__all__ = [
    "DEFAULT_AZURE_API_VERSION",
    "Conditions",
    "Cooldowns",
    "Engine",
    "EngineMetricsSettings",
    "ModelEntry",
    "ModelRoute",
    "Policy",
    "PolicyError",
    "PolicyWatcher",
    "Pool",
    "PrefixConfig",
    "PrefixMode",
    "PrefixSettings",
    "Provider",
    "ProviderApi",
    "ProviderHealthSettings",
    "QosClass",
    "RoutingSettings",
    "ShapeKind",
    "Target",
    "TenantAction",
    "TenantRule",
    "UnsupportedShape",
    "Weights",
    "address_for",
    "decode_policy",
    "default_policy",
    "load_policy",
    "parse_policy",
    "provider_path",
    "supports_shape",
    "target_api",
]
