"""The list+watch loop against the API double: events, bookmarks, 410 Gone, drops, restarts."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import pytest

from kinference.discovery.api import Collection, KubeApi, connect
from kinference.discovery.watch import Reflector, WatchStats, WatchTiming
from tests.api.helpers import wait_until
from tests.discovery.kube_double import KubeDouble
from tests.discovery.objects import NS, PODS, POOLS, inference_pool, pod

# Quick retries so a restarted double is found again well within a test's budget.
FAST = WatchTiming(watch_timeout_s=60, backoff_initial_s=0.05, backoff_max_s=0.5)


class Running:
    """A reflector running in a task, and the object names seen at each change."""

    def __init__(self, api: KubeApi, collection: Collection) -> None:
        self.seen: list[set[str]] = []
        self.reflector = Reflector(api, collection, self._changed, FAST, WatchStats())
        self.task = asyncio.create_task(self.reflector.run())

    def _changed(self) -> None:
        self.seen.append(set(self.reflector.objects))

    @property
    def names(self) -> set[str]:
        return set(self.reflector.objects)


@pytest.fixture
async def reflect(kube: KubeDouble) -> AsyncIterator[Callable[[Collection], Running]]:
    api = connect(namespace=NS, kubeconfig=None, server=kube.url, watch_timeout_s=60)
    running: list[Running] = []

    def start(collection: Collection) -> Running:
        running.append(Running(api, collection))
        return running[-1]

    yield start
    for item in running:
        item.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await item.task
    await api.aclose()


async def synced(running: Running) -> None:
    await asyncio.wait_for(running.reflector.synced.wait(), 10)


async def test_list_then_watch_follows_every_change(kube: KubeDouble, reflect: Callable) -> None:
    kube.put(PODS, pod("a", "10.1.0.1"))
    kube.put(PODS, pod("b", "10.1.0.2"))
    running = reflect(Collection(PODS))
    await synced(running)
    assert running.names == {"a", "b"}
    await wait_until(lambda: kube.watch_count == 1, what="the watch to open")

    kube.put(PODS, pod("c", "10.1.0.3"))
    await wait_until(lambda: running.names == {"a", "b", "c"}, what="ADDED")
    kube.put(PODS, pod("a", "10.1.0.1", ready=False))
    await wait_until(
        lambda: running.reflector.objects["a"]["status"]["conditions"][1]["status"] == "False",
        what="MODIFIED",
    )
    kube.delete(PODS, "b")
    await wait_until(lambda: running.names == {"a", "c"}, what="DELETED")
    assert running.reflector.resource_version == str(kube.revision)
    assert running.reflector.stats.relists == 0
    watch = [q for path, q in kube.requests if path == PODS and q.get("watch")]
    assert watch[0]["allowWatchBookmarks"] == "true"
    assert watch[0]["resourceVersion"] == "2"  # the list's version


async def test_label_selector_filters_and_unmatching_is_deleted(
    kube: KubeDouble, reflect: Callable
) -> None:
    kube.put(PODS, pod("a", "10.1.0.1", {"app": "x"}))
    kube.put(PODS, pod("b", "10.1.0.2", {"app": "y"}))
    running = reflect(Collection(PODS, label_selector="app=x"))
    await synced(running)
    assert running.names == {"a"}
    await wait_until(lambda: kube.watch_count == 1, what="the watch to open")
    kube.put(PODS, pod("a", "10.1.0.1", {"app": "y"}))  # relabelled away
    await wait_until(lambda: running.names == set(), what="a relabelled pod to leave")


async def test_bookmark_advances_the_version_so_no_relist_is_needed(
    kube: KubeDouble, reflect: Callable
) -> None:
    kube.put(PODS, pod("a", "10.1.0.1"))
    running = reflect(Collection(PODS))
    await synced(running)
    await wait_until(lambda: kube.watch_count == 1, what="the watch to open")
    for i in range(5):  # other collections move the shared revision on
        kube.put(POOLS, inference_pool(f"p{i}"))
    assert running.reflector.resource_version == "1"
    mark = kube.bookmark()
    await wait_until(lambda: running.reflector.resource_version == str(mark), what="bookmark")

    kube.compact()  # history before the bookmark is gone
    kube.drop_watches()
    await wait_until(lambda: kube.watch_count == 1, what="the watch to resume")
    assert running.reflector.stats.relists == 0  # resumed from the bookmark: no 410
    resumed = [q for path, q in kube.requests if path == PODS and q.get("watch")][-1]
    assert resumed["resourceVersion"] == str(mark)
    kube.put(PODS, pod("b", "10.1.0.2"))
    await wait_until(lambda: running.names == {"a", "b"}, what="events after the resume")


async def test_gone_relists_without_losing_objects(kube: KubeDouble, reflect: Callable) -> None:
    kube.put(PODS, pod("keep", "10.1.0.1"))
    kube.put(PODS, pod("old", "10.1.0.2"))
    running = reflect(Collection(PODS))
    await synced(running)
    await wait_until(lambda: kube.watch_count == 1, what="the watch to open")

    await kube.stop()  # changes made while the client is away, then compacted away
    kube.put(PODS, pod("new", "10.1.0.3"))
    kube.delete(PODS, "old")
    kube.compact()
    await kube.start()

    await wait_until(lambda: running.names == {"keep", "new"}, what="the relist")
    assert running.reflector.stats.relists == 1
    assert running.reflector.stats.watch_restarts >= 1
    assert all("keep" in names for names in running.seen)  # never lost on the way
    await wait_until(lambda: kube.watch_count == 1, what="the watch to resume")
    kube.put(PODS, pod("later", "10.1.0.4"))
    await wait_until(lambda: "later" in running.names, what="events after the relist")


async def test_dropped_watch_resumes_from_its_version(kube: KubeDouble, reflect: Callable) -> None:
    kube.put(PODS, pod("a", "10.1.0.1"))
    running = reflect(Collection(PODS))
    await synced(running)
    await wait_until(lambda: kube.watch_count == 1, what="the watch to open")
    kube.put(PODS, pod("b", "10.1.0.2"))
    await wait_until(lambda: running.names == {"a", "b"}, what="ADDED")

    kube.drop_watches()
    await wait_until(lambda: kube.watch_count == 1, what="the watch to resume")
    kube.put(PODS, pod("c", "10.1.0.3"))
    await wait_until(lambda: running.names == {"a", "b", "c"}, what="events after the drop")
    assert running.reflector.stats.relists == 0
    assert running.reflector.stats.watch_restarts == 1
    lists = [q for path, q in kube.requests if path == PODS and not q.get("watch")]
    assert len(lists) == 1


async def test_server_down_at_start_is_retried_until_it_answers(
    kube: KubeDouble, reflect: Callable
) -> None:
    await kube.stop()
    kube.put(PODS, pod("a", "10.1.0.1"))
    running = reflect(Collection(PODS))
    await wait_until(lambda: running.reflector.stats.watch_restarts >= 2, what="retries")
    assert not running.reflector.synced.is_set()
    await kube.start()
    await synced(running)
    assert running.names == {"a"}


async def test_watch_that_the_server_ends_is_reopened(kube: KubeDouble) -> None:
    api = connect(namespace=NS, kubeconfig=None, server=kube.url, watch_timeout_s=1)
    timing = WatchTiming(watch_timeout_s=1, backoff_initial_s=0.05, backoff_max_s=0.5)
    stats = WatchStats()
    reflector = Reflector(api, Collection(PODS), lambda: None, timing, stats)
    task = asyncio.create_task(reflector.run())
    try:
        kube.put(PODS, pod("a", "10.1.0.1"))
        await wait_until(lambda: len([q for _, q in kube.requests if q.get("watch")]) >= 2)
        watches = [q for _, q in kube.requests if q.get("watch")]
        assert watches[0]["timeoutSeconds"] == "1"
        assert watches[1]["resourceVersion"] == "1"  # resumed from the ADDED event
        assert stats.relists == 0
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await api.aclose()


async def test_watches_ended_at_once_back_off_instead_of_spinning(
    kube: KubeDouble, reflect: Callable
) -> None:
    kube.end_watches_at_once = True
    running = reflect(Collection(PODS))
    await synced(running)
    await wait_until(lambda: running.reflector.stats.watch_restarts >= 3, what="backoff")
    watches = [q for _, q in kube.requests if q.get("watch")]
    # FAST backs off 0.05, 0.1, 0.2 s...: a spinning loop would have sent hundreds.
    assert len(watches) < 20
    assert running.reflector.stats.relists == 0  # its version is still good


async def test_refused_credentials_are_retried_and_never_sync(kube: KubeDouble) -> None:
    kube.token = "expected"
    api = connect(namespace=NS, kubeconfig=None, server=kube.url, watch_timeout_s=60)
    reflector = Reflector(api, Collection(PODS), lambda: None, FAST, WatchStats())
    task = asyncio.create_task(reflector.run())
    try:
        await wait_until(lambda: reflector.stats.watch_restarts >= 2, what="retries")
        assert not reflector.synced.is_set()
        assert all(not q.get("watch") for _, q in kube.requests)  # only lists were tried
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await api.aclose()
