"""Reloading the policy file when it changes, without ever dropping to a bad policy.

The file is read on every poll and compared by content hash, not by modification time: a
Kubernetes ConfigMap volume updates by swapping a `..data` symlink, which leaves the
mtime of the path the picker opened unchanged. Reading a policy file once a second costs
microseconds. Only a new policy (not a new comment) is handed to `on_change`.

A file that cannot be read or does not validate keeps the policy in force; the reason is
logged once (not once per poll) and shows in the metrics:

    kinference_policy_reloads_total{result="ok"|"error"}
    kinference_policy_last_reload_ok        1 while the file on disk is in force, else 0
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge

from kinference.config.loader import PolicyError, decode_policy, read_policy_bytes
from kinference.config.policy import Policy
from kinference.tasks import cancel_and_wait

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]


class PolicyWatcher:
    """Polls a policy file and calls `on_change` with each new valid policy.

    `current` is the policy already in force (loaded from the same file at start-up), so
    the first poll does not report it as a change. `on_change` runs on the event loop;
    reading and validating the file run in a worker thread, off the Pick path.
    """

    def __init__(
        self,
        path: Path,
        on_change: Callable[[Policy], None],
        *,
        registry: CollectorRegistry,
        current: Policy | None = None,
        interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s!r}")
        self.path = path
        # The policy last handed to `on_change` (or `current`): the one in force.
        self.policy = current
        self._on_change = on_change
        self._interval_s = interval_s  # seconds between polls
        self._clock = clock  # seconds, monotonic
        self._sleep = sleep
        self._digest: bytes | None = None  # SHA-256 of the content last validated
        self._failure: str | None = None  # why the last attempt failed, until one succeeds
        self._task: asyncio.Task[None] | None = None
        self._reloads = Counter(
            "kinference_policy_reloads",
            "Policy file reloads: ok (a new policy applied, or the file valid again), error.",
            ["result"],
            registry=registry,
        )
        self._last_ok = Gauge(
            "kinference_policy_last_reload_ok",
            "1 when the policy file on disk is the policy in force, 0 after a failed reload.",
            registry=registry,
        )
        for result in ("ok", "error"):
            self._reloads.labels(result)  # export zeros before the first reload
        self._last_ok.set(1)

    def start(self) -> None:
        """Start polling every `interval_s` seconds (on the running loop); idempotent."""
        if self._task is None:
            self._task = asyncio.create_task(self._poll_forever(), name="kinference-policy")

    async def aclose(self) -> None:
        """Stop polling; the policy in force stays as it is."""
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def check(self) -> bool:
        """Poll once; True when a new policy was handed to `on_change`."""
        try:
            data = await asyncio.to_thread(read_policy_bytes, self.path)
        except PolicyError as exc:
            self._digest = None  # when it is back, look at it again even if unchanged
            self._fail(str(exc))
            return False
        digest = hashlib.sha256(data).digest()
        if digest == self._digest:
            return False
        self._digest = digest
        try:
            policy = await asyncio.to_thread(decode_policy, data, str(self.path))
        except PolicyError as exc:
            self._fail(str(exc))
            return False
        return self._apply(policy)

    async def _poll_forever(self) -> None:
        deadline = self._clock()
        while True:
            # A fixed cadence; after a slow poll, start the next one without catching up.
            deadline = max(deadline + self._interval_s, self._clock())
            await self._sleep(max(0.0, deadline - self._clock()))
            try:
                await self.check()
            except Exception:  # a bug must not stop reloads for the life of the process
                log.exception("policy watch: unexpected error, will poll again")

    def _apply(self, policy: Policy) -> bool:
        if policy == self.policy:  # same rules, other bytes (comments, layout)
            self._succeed(changed=False)
            return False
        try:
            self._on_change(policy)
        except Exception as exc:
            self._fail(f"{self.path}: applying the new policy failed: {exc!r}", exc_info=True)
            return False
        self.policy = policy
        self._succeed(changed=True)
        return True

    def _succeed(self, *, changed: bool) -> None:
        self._last_ok.set(1)
        recovered, self._failure = self._failure is not None, None
        if changed:
            self._reloads.labels("ok").inc()
            log.info("policy reloaded from %s", self.path)
        elif recovered:
            self._reloads.labels("ok").inc()
            log.info("policy file %s is valid again; the policy is unchanged", self.path)

    def _fail(self, reason: str, *, exc_info: bool = False) -> None:
        self._last_ok.set(0)
        if reason == self._failure:  # the same problem as last poll: said already
            return
        self._failure = reason
        self._reloads.labels("error").inc()
        log.error("policy reload failed, keeping the current policy: %s", reason, exc_info=exc_info)
