"""A local Kubernetes API double speaking the real list/watch protocol over HTTP/1.1.

Collections are namespaced paths (`/apis/.../namespaces/NS/inferencepools`,
`/api/v1/namespaces/NS/pods`). As in the real API server:

- every write takes the next resourceVersion of one global counter (etcd's revision);
- `GET path` answers a `List` whose `metadata.resourceVersion` is the current revision;
- `GET path?watch=1&resourceVersion=RV` streams newline-delimited JSON events after RV, then
  live ones, until `timeoutSeconds`; BOOKMARK events only with `allowWatchBookmarks=true`;
  an RV older than the compaction point gets an ERROR event carrying a 410 Expired Status;
- `labelSelector=k=v,...` filters lists and watches; an object that stops (starts) matching
  is seen as DELETED (ADDED) by a filtered watch;
- with a token set, requests without `Authorization: Bearer TOKEN` get a 401 Status.

Tests drive it directly: `put`, `delete`, `bookmark`, `compact`, `drop_watches`, `stop` and
`start` again on the same port (state survives, as etcd does behind a restarted server).
"""

from __future__ import annotations

import asyncio
import copy
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

Obj = dict[str, Any]
_COLLECTIONS = ("/pods", "/inferencepools")


@dataclass
class _Event:
    rv: int
    path: str
    type: str  # ADDED, MODIFIED or DELETED
    old: Obj | None
    new: Obj


@dataclass(eq=False)  # identity, so watchers can live in a set
class _Watcher:
    path: str
    selector: dict[str, str]
    bookmarks: bool
    writer: asyncio.StreamWriter
    queue: asyncio.Queue[Obj | None] = field(default_factory=asyncio.Queue)  # None: cut


def _selector(text: str) -> dict[str, str]:
    pairs = (item.split("=", 1) for item in text.split(",") if item)
    return {key: value for key, value in pairs}


def _matches(selector: dict[str, str], obj: Obj | None) -> bool:
    if obj is None:
        return False
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in selector.items())


def _status(code: int, reason: str, message: str) -> Obj:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class KubeDouble:
    """The API server double; `url` is valid between `start` and `stop`."""

    def __init__(self, token: str = "") -> None:
        self.token = token
        self.revision = 0
        self.objects: dict[str, dict[str, Obj]] = {}  # path -> name -> object
        self.history: list[_Event] = []
        self.compacted = 0  # events at or below this revision are gone
        self.requests: list[tuple[str, dict[str, str]]] = []  # (path, query) received
        self.port = 0
        self.end_watches_at_once = False  # as a misbehaving proxy might
        self._watchers: set[_Watcher] = set()
        self._handlers: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        """Listen on `port` (a free one the first time)."""
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening and cut every connection, as a crashed API server would."""
        if self._server is not None:
            self._server.close()
            self._server = None
        self.drop_watches()
        for writer in self._handlers.values():
            writer.transport.abort()
        await asyncio.gather(*self._handlers)

    # --- writes ---------------------------------------------------------------------------

    def put(self, path: str, obj: Obj) -> Obj:
        """Create or replace `obj` (by metadata.name) at the next revision; returns it."""
        self.revision += 1
        new = copy.deepcopy(obj)
        new.setdefault("metadata", {})["resourceVersion"] = str(self.revision)
        new["metadata"].setdefault("namespace", path.partition("/namespaces/")[2].partition("/")[0])
        name = new["metadata"]["name"]
        old = self.objects.setdefault(path, {}).get(name)
        self.objects[path][name] = new
        self._publish(_Event(self.revision, path, "MODIFIED" if old else "ADDED", old, new))
        return new

    def delete(self, path: str, name: str) -> None:
        self.revision += 1
        old = self.objects[path].pop(name)
        gone = copy.deepcopy(old)
        gone["metadata"]["resourceVersion"] = str(self.revision)
        self._publish(_Event(self.revision, path, "DELETED", old, gone))

    def bookmark(self) -> int:
        """Send a BOOKMARK at the current revision to every watch that allows them."""
        for watcher in self._watchers:
            if watcher.bookmarks:
                meta = {"resourceVersion": str(self.revision)}
                watcher.queue.put_nowait({"type": "BOOKMARK", "object": {"metadata": meta}})
        return self.revision

    def compact(self) -> None:
        """Forget the history so far: watches from an older revision get 410 Gone."""
        self.compacted = self.revision
        self.history.clear()

    def drop_watches(self) -> None:
        """Cut every watch connection mid-stream (no terminating chunk)."""
        for watcher in list(self._watchers):
            watcher.writer.transport.abort()
            watcher.queue.put_nowait(None)  # ends its handler
        self._watchers.clear()

    @property
    def watch_count(self) -> int:
        return len(self._watchers)

    def _publish(self, event: _Event) -> None:
        self.history.append(event)
        for watcher in self._watchers:
            if watcher.path == event.path and (seen := _as_seen(event, watcher.selector)):
                watcher.queue.put_nowait(seen)

    # --- HTTP -----------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers[task] = writer
        try:
            await self._serve_one(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            del self._handlers[task]
            writer.transport.abort()

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        _method, target, _version = head[0].split(" ")
        headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:])}
        url = urlsplit(target)
        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        self.requests.append((url.path, query))
        if self.token and headers.get("authorization") != f"Bearer {self.token}":
            return await _reply(writer, 401, _status(401, "Unauthorized", "Unauthorized"))
        if not url.path.endswith(_COLLECTIONS):
            return await _reply(
                writer, 404, _status(404, "NotFound", "the server could not find it")
            )
        selector = _selector(query.get("labelSelector", ""))
        if query.get("watch") in ("1", "true"):
            return await self._watch(writer, url.path, selector, query)
        objects = self.objects.get(url.path, {}).values()
        items = [o for o in objects if _matches(selector, o)]
        listed = {"kind": "List", "metadata": {"resourceVersion": str(self.revision)}}
        await _reply(writer, 200, listed | {"items": items})

    async def _watch(
        self,
        writer: asyncio.StreamWriter,
        path: str,
        selector: dict[str, str],
        query: dict[str, str],
    ) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        )
        if self.end_watches_at_once:
            return await _end(writer)
        since = int(query.get("resourceVersion") or 0)
        if since and since < self.compacted:
            message = f"too old resource version: {since} ({self.compacted})"
            await _chunk(writer, {"type": "ERROR", "object": _status(410, "Expired", message)})
            return await _end(writer)
        watcher = _Watcher(path, selector, query.get("allowWatchBookmarks") == "true", writer)
        for event in self._backlog(path, selector, since):
            watcher.queue.put_nowait(event)
        self._watchers.add(watcher)
        try:
            async with asyncio.timeout(float(query.get("timeoutSeconds", 3600))):
                while (event := await watcher.queue.get()) is not None:
                    await _chunk(writer, event)
        except TimeoutError:
            await _end(writer)
        finally:
            self._watchers.discard(watcher)

    def _backlog(self, path: str, selector: dict[str, str], since: int) -> list[Obj]:
        if not since:  # "0" or absent: the current state as synthetic ADDED events
            objects = self.objects.get(path, {}).values()
            return [{"type": "ADDED", "object": o} for o in objects if _matches(selector, o)]
        events = (e for e in self.history if e.path == path and e.rv > since)
        return [seen for e in events if (seen := _as_seen(e, selector))]


def _as_seen(event: _Event, selector: dict[str, str]) -> Obj | None:
    """The event as a watch filtered by `selector` sees it (None: not at all)."""
    before, after = _matches(selector, event.old), _matches(selector, event.new)
    if event.type == "DELETED":
        kind = "DELETED" if before else None
    elif before and after:
        kind = "MODIFIED"
    elif after:
        kind = "ADDED"
    else:
        kind = "DELETED" if before else None
    return {"type": kind, "object": event.new} if kind else None


async def _reply(writer: asyncio.StreamWriter, code: int, body: Obj) -> None:
    data = json.dumps(body).encode()
    writer.write(
        f"HTTP/1.1 {code} X\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
        + data
    )
    await writer.drain()


async def _chunk(writer: asyncio.StreamWriter, event: Obj) -> None:
    line = json.dumps(event).encode() + b"\n"
    writer.write(b"%x\r\n%s\r\n" % (len(line), line))
    await writer.drain()


async def _end(writer: asyncio.StreamWriter) -> None:
    writer.write(b"0\r\n\r\n")
    await writer.drain()
