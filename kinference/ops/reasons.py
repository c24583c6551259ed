"""Reason codes as metric labels: the routing core's typed codes (`routing.reasons.Reason`).

The reason text names models, pools and tenants, so it is never a label (unbounded, and a
caller chooses part of it); each decision carries its code, and the label is the code's
value. No text is parsed back.
"""

from __future__ import annotations

from kinference.routing.reasons import Reason

# Every code a label may carry, for docs, tests and pre-created metric children.
CODES = frozenset(reason.value for reason in Reason)


def label(code: Reason) -> str:
    """The metric label value of a code."""
    return code.value
