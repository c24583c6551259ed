"""The policy in force: the policy file's, with the pools discovery found merged in.

For each discovered InferencePool (`namespace/name`):

- a policy-file pool of the same `namespace/name` supplies `models`, `engine` and
  `metrics_path`, and discovery replaces its `endpoints` (this is also how `models:`
  targets name a discovered pool: the file must declare it to validate);
- otherwise the InferencePool's annotations supply them (`kinference.io/models`, required;
  `kinference.io/engine`, `kinference.io/metrics-path`);
- otherwise it is skipped with a warning: the picker cannot know what it serves.

Policy-file pools that discovery did not find stay as written (static endpoints).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from kinference.config import Policy, Pool
from kinference.discovery.pools import (
    ENGINE_ANNOTATION,
    METRICS_PATH_ANNOTATION,
    DiscoveredPool,
)

log = logging.getLogger(__name__)


def discovered_pool(found: DiscoveredPool, declared: Pool | None) -> Pool:
    """The policy pool for one InferencePool; raises ValueError when it cannot be built."""
    spec = found.spec
    fields: dict[str, Any]
    if declared is not None:
        fields = declared.model_dump()
    elif spec.models:
        fields = {"namespace": spec.namespace, "name": spec.name, "models": spec.models}
        annotations = spec.annotations
        if ENGINE_ANNOTATION in annotations:
            fields["engine"] = annotations[ENGINE_ANNOTATION]
        if METRICS_PATH_ANNOTATION in annotations:
            fields["metrics_path"] = annotations[METRICS_PATH_ANNOTATION]
    else:
        raise ValueError(
            "no models: annotate it kinference.io/models or declare it in the policy file"
        )
    fields["endpoints"] = found.endpoints
    try:
        return Pool.model_validate(fields)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ValueError(problems) from None


class PolicySource:
    """Merges the policy file's policy with discovered pools; hands each new result to `apply`.

    Nothing is applied until `set_discovered` is first called, and a merge equal to the one
    in force is not applied again (pod status updates rarely change endpoints).
    """

    def __init__(self, file_policy: Policy, apply: Callable[[Policy], None]) -> None:
        self.file_policy = file_policy
        self.discovered: Mapping[str, DiscoveredPool] = {}
        self.skipped: dict[str, str] = {}  # pool ref -> why it is not routed to
        self._apply = apply
        self._pools: tuple[Pool, ...] = file_policy.pools

    def set_file_policy(self, policy: Policy) -> None:
        """A reloaded policy file (PolicyWatcher's `on_change`)."""
        self.file_policy = policy
        self._update(force=True)

    def set_discovered(self, pools: Mapping[str, DiscoveredPool]) -> None:
        """The InferencePools found now, by `namespace/name`."""
        self.discovered = pools
        self._update(force=False)

    def merged(self) -> Policy:
        """The file's policy with its pools merged with the discovered ones."""
        pools = self._merge_pools()
        values = {name: getattr(self.file_policy, name) for name in Policy.model_fields}
        return Policy(**(values | {"pools": pools}))

    def _update(self, *, force: bool) -> None:
        previous = self._pools
        try:
            policy = self.merged()
        except ValidationError as exc:  # not expected: every merged pool validated alone
            log.error("merged policy invalid, the one in force stays: %s", exc)
            return
        if force or policy.pools != previous:
            self._pools = policy.pools
            self._apply(policy)

    def _merge_pools(self) -> tuple[Pool, ...]:
        declared = {pool.ref: pool for pool in self.file_policy.pools}
        merged = dict(declared)
        skipped: dict[str, str] = {}
        for ref, found in sorted(self.discovered.items()):
            try:
                merged[ref] = discovered_pool(found, declared.get(ref))
            except ValueError as exc:
                skipped[ref] = str(exc)
                if self.skipped.get(ref) != skipped[ref]:  # once per distinct problem
                    log.warning("discovered InferencePool %s is not routed to: %s", ref, exc)
        self.skipped = skipped
        return tuple(merged.values())
