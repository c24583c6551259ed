"""The base of every plugin's config model (the policy file's `routing:` sub-sections).

Plugin configs are declared in their plugin's module, with their defaults, and composed by
`kinference.config.routing`; they do not import the config package (which imports them), so
this base repeats its rules: frozen, unknown keys are errors, no NaN or infinity.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class PluginConfig(BaseModel):
    """Frozen, strict: a misspelt key is an error rather than silently ignored."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
