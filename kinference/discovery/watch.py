"""List then watch one collection, keeping a local copy of its objects (a reflector).

The loop, as client-go's reflector does it:

1. LIST the collection; its `metadata.resourceVersion` is where the watch starts.
2. WATCH from that version with `allowWatchBookmarks=true`. Every event (BOOKMARK too)
   advances the version, so a watch that the server ends after `timeoutSeconds`, or that
   drops, resumes from the last version seen without listing again.
3. 410 Gone (the version was compacted away) lists again; the new list replaces the copy
   whole, so an object deleted meanwhile disappears then and nothing else is lost.

Failures (connection refused or dropped, a failure Status) back off exponentially with
jitter (tenacity) and retry forever; the backoff starts over once a watch has made progress.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    wait_exponential,
    wait_random,
)

from kinference.discovery.api import Collection, KubeApi, WatchGone

log = logging.getLogger(__name__)

# A watch that lived this long (seconds) or delivered an event counts as progress: the next
# failure retries at once, with the backoff starting over.
PROGRESS_AFTER_S = 10.0
# An empty watch the server ends sooner than this (seconds) counts as a failure.
MIN_WATCH_S = 1.0


@dataclass(frozen=True)
class WatchTiming:
    """How long watches last and how retries back off, in seconds."""

    watch_timeout_s: int = 300
    backoff_initial_s: float = 0.2
    backoff_max_s: float = 30.0


@dataclass
class WatchStats:
    """Counts for the metrics, shared by the reflectors of one resource (they come and go)."""

    relists: int = 0  # successful lists after a reflector's first
    watch_restarts: int = 0  # watches re-opened after a failure or a drop


class Reflector:
    """Keeps `objects` (by name) equal to a collection's, calling `on_change` after each change.

    `synced` is set once the first list has been applied.
    """

    def __init__(
        self,
        api: KubeApi,
        collection: Collection,
        on_change: Callable[[], None],
        timing: WatchTiming,
        stats: WatchStats,
    ) -> None:
        self.api = api
        self.collection = collection
        self.objects: dict[str, dict[str, Any]] = {}
        self.resource_version = ""  # "" = list before watching
        self.stats = stats
        self.last_event_at: float | None = None  # time.monotonic() of the last list or event
        self.synced = asyncio.Event()
        self._on_change = on_change
        self._timing = timing

    async def run(self) -> None:
        """List and watch until cancelled."""
        while True:
            retrying = AsyncRetrying(
                # Everything but cancellation is retried: the API server may be restarting,
                # unreachable, refusing us until RBAC is fixed, or sending what we cannot
                # read; discovery must outlive all of it (each failure is logged).
                retry=retry_if_exception_type(Exception),
                # Doubling from the initial wait up to the cap, plus up to one initial wait of
                # jitter so that replicas cut off together do not retry together.
                wait=wait_exponential(
                    multiplier=self._timing.backoff_initial_s, max=self._timing.backoff_max_s
                )
                + wait_random(0, self._timing.backoff_initial_s),
                before_sleep=self._note_failure,
            )
            await retrying(self._list_and_watch)

    async def _list_and_watch(self) -> None:
        """One list (when needed) and one watch; returns after progress, raises otherwise."""
        fresh_list = not self.resource_version
        if fresh_list:
            await self._relist()
        started = time.monotonic()
        events = 0
        try:
            async for event in self.api.watch(
                self.collection, self.resource_version, self._timing.watch_timeout_s
            ):
                events += 1
                self._apply(event)
        except WatchGone:
            self.resource_version = ""
            if fresh_list and not events:
                raise  # Gone right after a list: something is wrong; back off first
            log.info("watch %s: resourceVersion expired, listing again", self.collection.path)
            return
        except Exception as exc:
            if not (events or time.monotonic() - started > PROGRESS_AFTER_S):
                raise
            log.info("watch %s dropped (%s); resuming", self.collection.path, _describe(exc))
            self.stats.watch_restarts += 1
        else:
            # A watch the server ended (timeoutSeconds) resumes from the last version; one
            # ended at once with nothing in it (a misbehaving proxy) must not spin.
            if not events and time.monotonic() - started < MIN_WATCH_S:
                raise ConnectionError("watch ended as soon as it opened")

    async def _relist(self) -> None:
        listed = await self.api.list(self.collection)
        items = listed.get("items") or []
        self.objects = {name: item for item in items if (name := _name(item))}
        self.resource_version = str(listed.get("metadata", {}).get("resourceVersion", ""))
        if self.synced.is_set():
            self.stats.relists += 1
        self.last_event_at = time.monotonic()
        self.synced.set()  # before on_change, which reads it
        self._changed()

    def _apply(self, event: dict[str, Any]) -> None:
        obj = event["object"]
        kind = event.get("type")
        metadata = obj.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        self.last_event_at = time.monotonic()
        version = metadata.get("resourceVersion")
        if kind == "BOOKMARK":
            if version:
                self.resource_version = str(version)
            return
        name = _name(obj)
        if kind in ("ADDED", "MODIFIED") and name:
            self.objects[name] = obj
        elif kind == "DELETED" and name:
            self.objects.pop(name, None)
        else:
            log.warning("watch %s: ignored event of type %r", self.collection.path, kind)
            return
        if version:
            self.resource_version = str(version)
        self._changed()

    def _changed(self) -> None:
        # The copy is current whatever the consumer does with it; a consumer failing must
        # not stop the watch (the next change gives it another chance).
        try:
            self._on_change()
        except Exception:
            log.exception("applying a change of %s failed", self.collection.path)

    def _note_failure(self, state: RetryCallState) -> None:
        self.stats.watch_restarts += 1
        outcome = state.outcome
        error = outcome.exception() if outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        log.warning(
            "watch %s failed (%s); retrying in %.1f s",
            self.collection.path,
            _describe(error),
            wait,
        )


def _name(obj: Any) -> str:
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return name if isinstance(name, str) else ""


def _describe(exc: BaseException | None) -> str:
    return f"{type(exc).__name__}: {exc}" if exc is not None else "unknown error"
