"""The models clients ask for, and the targets (pool or provider, and model) serving them.

A `models:` entry names what clients send in the body's `model` field, its aliases, and an
ordered list of targets. Which target a request gets is decided at Pick (see
docs/configuration.md, "How the model is chosen"); this module only says what a target is
and whether its `when` conditions hold for a request.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeInt, field_validator, model_validator

from kinference.config.fields import (
    ApiPath,
    ItemError,
    ModelName,
    PolicyModel,
    Ref,
    Word,
    reject_duplicates,
)

# `primary` targets are tried first, in order; `overflow` targets only when no primary
# target can take the request.
Use = Literal["primary", "overflow"]
# The body field a target expects the output-length limit in; the rewrite renames the
# other one to it.
MaxTokensField = Literal["max_tokens", "max_completion_tokens"]
# The request API a destination speaks: `openai` (chat completions, completions, embeddings,
# responses) or `anthropic` (Messages). A conversation written for the other one is
# translated at Pick (Anthropic Messages <-> OpenAI chat), and its response by the gateway.
TargetApi = Literal["openai", "anthropic"]


class Conditions(PolicyModel):
    """Request features a target is limited to; every condition given must hold."""

    # Bounds on the request's prompt-token estimate, both inclusive.
    min_prompt_tokens: NonNegativeInt | None = None
    max_prompt_tokens: NonNegativeInt | None = None
    # true: only requests that declare tools; false: only requests without tools.
    tools: bool | None = None
    # Only requests carrying this explicit hint.
    hint: Word | None = None

    @model_validator(mode="after")
    def _bounds_in_order(self) -> Conditions:
        low, high = self.min_prompt_tokens, self.max_prompt_tokens
        if low is not None and high is not None and low > high:
            raise ItemError(
                f"min_prompt_tokens ({low}) is greater than max_prompt_tokens ({high})",
                "min_prompt_tokens",
            )
        return self

    def matches(self, prompt_tokens: int, has_tools: bool, hint: str | None = None) -> bool:
        """Whether a request with these features may use the target."""
        if self.min_prompt_tokens is not None and prompt_tokens < self.min_prompt_tokens:
            return False
        if self.max_prompt_tokens is not None and prompt_tokens > self.max_prompt_tokens:
            return False
        if self.tools is not None and has_tools != self.tools:
            return False
        return self.hint is None or hint == self.hint


class Target(PolicyModel):
    """One place a model can be served: a pool or a provider, and the model name there."""

    pool: Ref | None = None
    provider: Ref | None = None
    # The model name the destination knows: one of the pool's `models`, or the provider's.
    model: ModelName
    # Provider targets only: the path to send to, replacing the client's (may carry a
    # query). None derives it from the provider's `api` and the request shape.
    path: ApiPath | None = None
    use: Use = "primary"
    # None leaves the client's field as it is.
    max_tokens_field: MaxTokensField | None = None
    # None: a pool speaks `openai` (every engine serves chat completions); a provider target
    # with its own `path` takes every request as written (no translation); another one the
    # API of its provider (`anthropic` for api: anthropic, else `openai`).
    api: TargetApi | None = None
    when: Conditions = Field(default_factory=Conditions)

    @property
    def destination(self) -> str:
        """The pool's or provider's `namespace/name`."""
        return self.pool if self.pool is not None else str(self.provider)

    @property
    def is_provider(self) -> bool:
        return self.provider is not None

    @model_validator(mode="after")
    def _one_destination(self) -> Target:
        if (self.pool is None) == (self.provider is None):
            raise ValueError("a target names exactly one of 'pool' or 'provider'")
        if self.pool is not None and self.path is not None:
            raise ItemError(
                "path applies only to provider targets (a pool is sent the client's path)",
                "path",
            )
        return self


class ModelEntry(PolicyModel):
    """A model clients can ask for by `name` or any alias, and its ordered targets."""

    name: ModelName
    aliases: tuple[ModelName, ...] = ()
    targets: tuple[Target, ...]

    @property
    def names(self) -> tuple[str, ...]:
        """The name, then the aliases: every name that resolves to this entry."""
        return (self.name, *self.aliases)

    @field_validator("targets")
    @classmethod
    def _some_targets(cls, targets: tuple[Target, ...]) -> tuple[Target, ...]:
        if not targets:
            raise ValueError("at least one target is required")
        return targets

    @model_validator(mode="after")
    def _aliases_differ(self) -> ModelEntry:
        for index, alias in enumerate(self.aliases):
            if alias == self.name:
                raise ItemError(f"alias {alias!r} repeats the model's name", "aliases", index)
        try:
            reject_duplicates(self.aliases, "alias")
        except ItemError as exc:
            raise ItemError(str(exc), "aliases", *exc.path) from None
        return self
