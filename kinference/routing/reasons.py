"""Typed reason codes of routing decisions: the metric label of every Pick's reason.

A decision carries one code plus its human text. The text names models, pools and tenants,
so it is never a label (unbounded, partly chosen by the caller); the code is. The values
are the label values dashboards already use.
"""

from __future__ import annotations

import enum


class Reason(enum.Enum):
    """Why a Pick ended as it did (NONE: nothing to say)."""

    NONE = "none"
    MALFORMED = "malformed"  # BAD_REQUEST: the body is not a request we can read
    UNKNOWN_MODEL = "unknown_model"  # no pool or provider serves the model
    UNKNOWN_POOL = "unknown_pool"  # the caller named a pool the policy does not have
    TENANT_RULE = "tenant_rule"  # no rule matches, or the rule forbids model or QoS
    TENANT_BUDGET = "tenant_budget"  # the tenant used its token budget
    SHED_SATURATED = "shed_saturated"  # QoS shed the request: every pool is saturated
    PROVIDER_COOLING = "provider_cooling"  # the only providers are cooling down
    NO_READY_ENDPOINT = "no_ready_endpoint"  # the pools have no ready worker
    SATURATED = "saturated"  # every worker is saturated
    NO_TARGET = "no_target"  # no target matches, serves the model or speaks the shape
    PARTIAL_PROMPT = "partial_prompt"  # DEGRADED: part of the prompt could not be hashed
    SHARED_STATE = "shared_state"  # DEGRADED: the cluster-wide view is incomplete
    PRECISE_FALLBACK = "precise_fallback"  # DEGRADED: a precise pool used the approximate index
    OTHER = "other"  # a reason from outside the routing core without a code of its own
