"""Reason codes: the free-text reason of a Pick folded into a fixed set, for metric labels.

The reason text names models, pools and tenants, so it cannot be a label (unbounded, and a
caller chooses part of it). The code keeps the cause and nothing the caller typed. A
NO_WORKERS reason joins the notes of every target tried; the first note that matches wins.
"""

from __future__ import annotations

NONE = "none"
OTHER = "other"
MALFORMED = "malformed"

# (substring of the router's or the cluster's reason text, code), most specific first.
_PATTERNS = (
    ("no pool or provider serves model", "unknown_model"),
    (" is not known", "unknown_pool"),
    ("matches no tenant rule", "tenant_rule"),
    (" may not use ", "tenant_rule"),
    ("used its budget", "tenant_budget"),
    ("used its share of the budget", "tenant_budget"),
    ("requests are shed", "shed_saturated"),
    ("is cooling down", "provider_cooling"),
    ("has no ready endpoint", "no_ready_endpoint"),
    ("is saturated", "saturated"),
    ("does not serve", "no_target"),
    ("has no endpoint for", "no_target"),
    ("no target of", "no_target"),
    ("no full prefix-cache signal", "partial_prompt"),
    ("shared state", "shared_state"),
)

# Every code a label may carry, for docs and tests.
CODES = frozenset({NONE, OTHER, MALFORMED} | {code for _, code in _PATTERNS})


def reason_code(outcome: str, reason: str) -> str:
    """The code of a Pick's reason; `outcome` is the Outcome's value (`bad_request`, ...)."""
    if outcome == "bad_request":
        return MALFORMED
    if not reason:
        return NONE
    for pattern, code in _PATTERNS:
        if pattern in reason:
            return code
    return OTHER
