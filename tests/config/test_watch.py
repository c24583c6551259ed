"""Reloading the policy file: a good change is applied, a bad one keeps the old policy."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from kinference.config import Policy, PolicyWatcher, load_policy

GOOD = "pools:\n  - {name: chat, endpoints: ['10.0.0.5:8000'], models: [m]}\n"
OTHER = "pools:\n  - {name: chat, endpoints: ['10.0.0.6:8000'], models: [m]}\n"
BAD = "pools:\n  - {name: chat, endpoints: ['10.0.0.5'], models: [m]}\n"


class Recorder:
    """An `on_change` that records the policies it was given."""

    def __init__(self) -> None:
        self.policies: list[Policy] = []
        self.changed = asyncio.Event()

    def __call__(self, policy: Policy) -> None:
        self.policies.append(policy)
        self.changed.set()


class Watched:
    """A policy file, a watcher on it (not started) and what it reported."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.write(text)
        self.registry = CollectorRegistry()
        self.recorder = Recorder()
        self.watcher = PolicyWatcher(
            path, self.recorder, registry=self.registry, current=load_policy(path)
        )

    def write(self, text: str) -> None:
        self.path.write_text(text, encoding="utf-8")

    def metric(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, labels)

    @property
    def reloads(self) -> tuple[float | None, float | None]:
        ok = self.metric("kinference_policy_reloads_total", result="ok")
        error = self.metric("kinference_policy_reloads_total", result="error")
        return ok, error

    @property
    def last_ok(self) -> float | None:
        return self.metric("kinference_policy_last_reload_ok")


@pytest.fixture
def watched(tmp_path: Path) -> Watched:
    return Watched(tmp_path / "policy.yaml", GOOD)


async def test_unchanged_file_is_not_a_change(watched: Watched) -> None:
    assert await watched.watcher.check() is False
    assert await watched.watcher.check() is False
    assert watched.recorder.policies == []
    assert watched.reloads == (0, 0)
    assert watched.last_ok == 1


async def test_good_change_is_applied(watched: Watched) -> None:
    await watched.watcher.check()
    watched.write(OTHER)
    assert await watched.watcher.check() is True
    assert [p.pools[0].endpoints for p in watched.recorder.policies] == [("10.0.0.6:8000",)]
    assert watched.watcher.policy == watched.recorder.policies[0]
    assert watched.reloads == (1, 0)
    assert watched.last_ok == 1


async def test_bad_change_keeps_the_policy_logs_once_and_counts(
    watched: Watched, caplog: pytest.LogCaptureFixture
) -> None:
    before = watched.watcher.policy
    watched.write(BAD)
    with caplog.at_level(logging.ERROR, logger="kinference.config.watch"):
        assert await watched.watcher.check() is False
        assert await watched.watcher.check() is False  # the same problem: said already
    assert watched.recorder.policies == []
    assert watched.watcher.policy is before
    assert watched.reloads == (0, 1)
    assert watched.last_ok == 0
    assert [record.getMessage() for record in caplog.records] == [
        "policy reload failed, keeping the current policy: "
        f"{watched.path}:2: pools[0].endpoints[0]: expected HOST:PORT, got '10.0.0.5'"
    ]
    watched.write(OTHER)
    assert await watched.watcher.check() is True
    assert watched.reloads == (1, 1)
    assert watched.last_ok == 1


async def test_fixing_back_to_the_policy_in_force_recovers(watched: Watched) -> None:
    watched.write(BAD)
    await watched.watcher.check()
    watched.write(GOOD + "# fixed\n")
    assert await watched.watcher.check() is False  # same policy: nothing to apply
    assert watched.recorder.policies == []
    assert watched.reloads == (1, 1)
    assert watched.last_ok == 1


async def test_comment_change_is_not_a_reload(watched: Watched) -> None:
    watched.write("# reviewed\n" + GOOD)
    assert await watched.watcher.check() is False
    assert watched.recorder.policies == []
    assert watched.reloads == (0, 0)


async def test_missing_file_keeps_the_policy_until_it_returns(watched: Watched) -> None:
    watched.path.unlink()
    assert await watched.watcher.check() is False
    assert await watched.watcher.check() is False
    assert watched.reloads == (0, 1)
    assert watched.last_ok == 0
    watched.write(GOOD)  # back, unchanged
    assert await watched.watcher.check() is False
    assert watched.reloads == (1, 1)
    assert watched.last_ok == 1


async def test_configmap_symlink_swap_is_seen(tmp_path: Path) -> None:
    # A ConfigMap volume: policy.yaml -> ..data/policy.yaml, ..data -> a timestamped dir.
    # An update writes a new dir and swaps ..data; the path's own mtime does not change.
    old, new = tmp_path / "..2024_01", tmp_path / "..2024_02"
    old.mkdir()
    new.mkdir()
    (old / "policy.yaml").write_text(GOOD, encoding="utf-8")
    (new / "policy.yaml").write_text(OTHER, encoding="utf-8")
    stat = (old / "policy.yaml").stat()
    os.utime(new / "policy.yaml", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    (tmp_path / "..data").symlink_to(old.name)
    path = tmp_path / "policy.yaml"
    path.symlink_to("..data/policy.yaml")
    recorder = Recorder()
    watcher = PolicyWatcher(path, recorder, registry=CollectorRegistry(), current=load_policy(path))
    assert await watcher.check() is False
    (tmp_path / "..data_tmp").symlink_to(new.name)
    (tmp_path / "..data_tmp").rename(tmp_path / "..data")  # atomic, as kubelet does it
    assert await watcher.check() is True
    assert recorder.policies[0].pools[0].endpoints == ("10.0.0.6:8000",)


async def test_failing_on_change_keeps_the_policy(
    watched: Watched, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(policy: Policy) -> None:
        raise RuntimeError("catalog rebuild failed")

    watcher = PolicyWatcher(
        watched.path, refuse, registry=CollectorRegistry(), current=watched.watcher.policy
    )
    watched.write(OTHER)
    with caplog.at_level(logging.ERROR, logger="kinference.config.watch"):
        assert await watcher.check() is False
    assert watcher.policy == watched.watcher.policy
    assert "applying the new policy failed: RuntimeError('catalog rebuild failed')" in (
        caplog.records[0].getMessage()
    )


async def test_without_a_current_policy_the_first_poll_applies_the_file(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(GOOD, encoding="utf-8")
    recorder = Recorder()
    watcher = PolicyWatcher(path, recorder, registry=CollectorRegistry())
    assert await watcher.check() is True
    assert recorder.policies == [load_policy(path)]


class Ticks:
    """An injected clock and sleep: each sleep waits until the test lets it go."""

    def __init__(self) -> None:
        self.now = 100.0
        self.asked: asyncio.Queue[float] = asyncio.Queue()
        self._go: asyncio.Queue[None] = asyncio.Queue()

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        await self.asked.put(seconds)
        await self._go.get()
        self.now += seconds

    def release(self) -> None:
        self._go.put_nowait(None)


async def test_polling_loop_applies_changes_and_stops(watched: Watched) -> None:
    ticks = Ticks()
    recorder = Recorder()
    watcher = PolicyWatcher(
        watched.path,
        recorder,
        registry=CollectorRegistry(),
        current=watched.watcher.policy,
        interval_s=2.5,
        clock=ticks.clock,
        sleep=ticks.sleep,
    )
    watcher.start()
    watcher.start()  # idempotent
    assert await asyncio.wait_for(ticks.asked.get(), 5) == 2.5
    watched.write(OTHER)
    ticks.release()
    await asyncio.wait_for(recorder.changed.wait(), 5)
    assert recorder.policies[0].pools[0].endpoints == ("10.0.0.6:8000",)
    assert await asyncio.wait_for(ticks.asked.get(), 5) == 2.5  # the same cadence
    await watcher.aclose()
    await watcher.aclose()  # idempotent
    assert watcher.policy == recorder.policies[0]


def test_interval_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="interval_s must be positive"):
        PolicyWatcher(tmp_path, lambda policy: None, registry=CollectorRegistry(), interval_s=0)
