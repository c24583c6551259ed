"""The large blocks' cache under Python's raw allocator (`kinference.native._blocks`,
installed by `kinference.heap.start_serving`). Installing it is for the life of a process,
so each case runs in an interpreter of its own, with the picker's fixed mmap threshold."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from kinference import native

pytestmark = pytest.mark.skipif(native.load_blocks() is None, reason="_blocks not built")

_PRELUDE = """
import json, random, resource, threading
from kinference import heap
from kinference.native import _blocks
heap.fix_mmap_threshold()
MIB = 1 << 20
bad = []  # the crowd's threads whose bytes read back differed

def churn(seed, steps, most_held):
    rng = random.Random(seed)
    held = []
    for step in range(steps):
        size = rng.randrange(200_000, 5 * MIB)
        fill = (seed * 31 + step) % 251
        held.append((bytes([fill]) * size, fill))
        if len(held) > most_held or rng.random() < 0.5:
            data, want = held.pop(rng.randrange(len(held)))
            if data.count(want) != len(data):
                bad.append(seed)

def crowd(count, steps, most_held):
    \"\"\"`count` threads making, filling, checking and freeing blocks of every class.\"\"\"
    threads = [
        threading.Thread(target=churn, args=(seed, steps, most_held)) for seed in range(count)
    ]
    for thread in threads:
        thread.start()
    return threads
"""


def _run(body: str) -> dict[str, object]:
    """The JSON the script printed last, run after the prelude in a fresh interpreter."""
    script = _PRELUDE + textwrap.dedent(body)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_a_freed_large_block_is_made_again_without_faulting_its_pages() -> None:
    """Without the cache each 1 MiB `bytes` is a fresh mapping: ~256 page faults on first
    write (~5,000 over these 20); with it, the freed block's pages are reused."""
    out = _run("""
        assert heap.cache_large_blocks()
        b"x" * MIB  # made and freed: kept
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(20):
            b"y" * MIB
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
        print(json.dumps({"faults": faults, **_blocks.stats()}))
    """)
    assert out["faults"] < 100
    assert out["reused"] >= 20
    assert out["live_blocks"] == 0


def test_not_installed_under_tracemalloc_whose_stop_would_unwrap_it() -> None:
    """tracemalloc.stop() puts back the allocator it wrapped at start: had the cache been
    installed in between, its blocks would then be freed by malloc's free."""
    out = _run("""
        import tracemalloc
        tracemalloc.start()
        installed = heap.cache_large_blocks()
        held = [b"z" * MIB for _ in range(4)]  # ours, had it installed
        tracemalloc.stop()
        del held  # freed by what tracemalloc put back
        print(json.dumps({"installed": installed, **_blocks.stats()}))
    """)
    assert out["installed"] is False and out["live_blocks"] == 0


def test_the_kept_blocks_never_exceed_the_cap() -> None:
    out = _run("""
        _blocks.install(256 * 1024, 4 * MIB, 4 * MIB)
        held = [bytes([i]) * MIB for i in range(20)]
        del held
        print(json.dumps(_blocks.stats()))
    """)
    assert out["kept_bytes"] <= 4 << 20
    assert out["unmapped"] >= 15
    assert out["live_blocks"] == 0


def test_sizes_outside_the_range_are_left_to_the_previous_allocator() -> None:
    out = _run("""
        _blocks.install(256 * 1024, 4 * MIB, 32 * MIB)
        small, large = b"s" * (200 * 1024), b"l" * (5 * MIB)
        inside = b"i" * MIB
        print(json.dumps(_blocks.stats()))
    """)
    assert out["live_blocks"] == 1  # `inside` alone


def test_contents_survive_growth_shrinking_and_reuse_across_classes() -> None:
    """A bytearray grown and shrunk through every class (realloc into, within, across and
    out of the range), and blocks of random sizes made, filled and freed in random order:
    every byte read back is the byte written."""
    out = _run("""
        _blocks.install(256 * 1024, 4 * MIB, 8 * MIB)
        rng = random.Random(7)
        grown, reference = bytearray(), []
        while len(grown) < 6 * MIB:
            part = rng.randbytes(rng.randrange(1, 300_000))
            grown += part
            reference.append(part)
        ok = bytes(grown) == b"".join(reference)
        for size in (3 * MIB, 1 * MIB + 5, 300_000, 100_000, 10):
            del grown[size:]
            ok &= bytes(grown) == b"".join(reference)[:size]
        live = {}
        for step in range(400):
            if live and rng.random() < 0.45:
                key = rng.choice(list(live))
                data, fill = live.pop(key)
                ok &= data == bytes([fill]) * len(data)
            else:
                size = rng.choice((rng.randrange(200_000, 5 * MIB), MIB + 37, 256 * 1024))
                live[step] = (bytes([step % 251]) * size, step % 251)
        ok &= all(data == bytes([fill]) * len(data) for data, fill in live.values())
        text = "é" * (700 * 1024) + "z"  # a str in the range (UCS-2: 1.4 MB)
        ok &= text.endswith("éz") and len(text) == 700 * 1024 + 1
        print(json.dumps({"ok": ok, **_blocks.stats()}))
    """)
    assert out["ok"] is True
    assert out["reused"] > 0


def test_threads_making_and_freeing_large_objects_at_once_read_back_what_they_wrote() -> None:
    """A crowd: 8 threads make, fill, check and free blocks of every class at once (the
    interpreter switches threads between them), the cache small enough to fill and spill."""
    out = _run("""
        _blocks.install(256 * 1024, 4 * MIB, 3 * MIB)
        for thread in crowd(8, steps=80, most_held=3):
            thread.join()
        print(json.dumps({"bad": bad, **_blocks.stats()}))
    """)
    assert out["bad"] == []
    assert out["reused"] > 0 and out["unmapped"] > 0  # both ways taken under the crowd
    assert out["kept_bytes"] <= 3 * (1 << 20) and out["live_blocks"] == 0


def test_it_installs_once_and_refuses_nonsense() -> None:
    out = _run("""
        first = heap.cache_large_blocks()
        again = heap.cache_large_blocks()
        try:
            _blocks.install(10, 5, 0)
            refused = False
        except ValueError:
            refused = True
        print(json.dumps({"first": first, "again": again, "refused": refused}))
    """)
    assert out == {"first": True, "again": False, "refused": True}


def test_a_forked_child_makes_large_objects() -> None:
    """A child forked while another thread makes large objects makes them too (the
    cache's lock is held across a fork, so no child starts with it taken)."""
    out = _run("""
        import os, threading
        heap.cache_large_blocks()
        stop = False
        def churn() -> None:
            while not stop:
                b"c" * MIB
        thread = threading.Thread(target=churn)
        thread.start()
        codes = []
        for _ in range(20):
            pid = os.fork()
            if pid == 0:
                os._exit(0 if len(b"k" * MIB + b"!") == MIB + 1 else 1)
            codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
        stop = True
        thread.join()
        print(json.dumps({"codes": sorted(set(codes))}))
    """)
    assert out == {"codes": [0]}


def test_release_unmaps_the_blocks_kept_longer_than_asked_and_only_those() -> None:
    """A block kept 1.5 s goes back at `release(1.0)`; one freed just before stays, and is
    then taken back without faulting. After `release(0)` nothing is kept, and the next
    block of the released class is a fresh mapping again (its pages fault in)."""
    out = _run("""
        import time
        heap.cache_large_blocks()
        before_install = _blocks.release(0)
        old = b"o" * (2 * MIB)  # a class of its own
        del old
        since = time.monotonic()
        while time.monotonic() - since < 1.5:  # the old block ages; no sleep: a busy wait
            pass
        young = b"y" * MIB
        del young
        kept = _blocks.stats()["kept_bytes"]
        aged = _blocks.release(1.0)
        none_yet = _blocks.release(3600.0)
        after = _blocks.stats()
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        b"r" * MIB  # the young block, taken back
        reused_faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
        everything = _blocks.release(0.0)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        b"f" * MIB  # its class now empty: a fresh mapping
        fresh_faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
        print(json.dumps({
            "before_install": before_install, "kept": kept, "aged": aged,
            "none_yet": none_yet, "after": after, "reused_faults": reused_faults,
            "everything": everything, "fresh_faults": fresh_faults, **_blocks.stats(),
        }))
    """)
    assert out["before_install"] == 0
    assert out["aged"] == 2 * (1 << 20) + 64 * 1024  # the old block's mapping alone
    assert out["none_yet"] == 0
    one_mib_block = (1 << 20) + 64 * 1024
    after = out["after"]
    assert isinstance(after, dict)
    assert after["kept_bytes"] == out["kept"] - out["aged"] == one_mib_block
    assert out["reused_faults"] < 64  # the young block's pages were still there
    assert out["everything"] == one_mib_block
    assert out["fresh_faults"] >= 200  # 256 pages of a fresh MiB
    assert out["released"] == 2 and out["live_blocks"] == 0
    assert out["kept_bytes"] == one_mib_block  # the fresh one, freed as the script ended


def test_release_refuses_nonsense() -> None:
    out = _run("""
        refused = 0
        for idle in (-1.0, float("nan")):
            try:
                _blocks.release(idle)
            except ValueError:
                refused += 1
        print(json.dumps({"refused": refused}))
    """)
    assert out == {"refused": 2}


def test_threads_churning_while_another_releases_read_back_what_they_wrote() -> None:
    """A crowd against the release: 6 threads make, fill, check and free blocks while the
    main thread releases every kept block over and over; nothing read back differs, and once
    they stop, a last release leaves nothing kept and the counts add up."""
    out = _run("""
        _blocks.install(256 * 1024, 4 * MIB, 16 * MIB)
        threads = crowd(6, steps=120, most_held=2)
        releases = 0
        while any(thread.is_alive() for thread in threads):
            releases += _blocks.release(0.0) > 0
        for thread in threads:
            thread.join()
        _blocks.release(0.0)
        print(json.dumps({"bad": bad, "releases": releases, **_blocks.stats()}))
    """)
    assert out["bad"] == []
    assert out["releases"] > 0 and out["released"] > 0 and out["reused"] > 0
    assert out["kept_bytes"] == 0 and out["live_blocks"] == 0


def test_a_serving_process_returns_its_idle_blocks() -> None:
    """`heap.idle_blocks_returned`, which `kinference serve` and `kinference gateway` run
    while they serve: kept blocks idle past `idle_s` are unmapped by its periodic look."""
    out = _run("""
        import asyncio, time
        heap.cache_large_blocks()
        async def main() -> dict:
            held = [bytes([i]) * MIB for i in range(6)]
            del held
            kept = _blocks.stats()["kept_bytes"]
            async with heap.idle_blocks_returned(period_s=0.01, idle_s=0.05):
                deadline = time.monotonic() + 30
                while _blocks.stats()["kept_bytes"] and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
            return {"kept": kept, "kept_bytes_metric": heap.kept_block_bytes()}
        print(json.dumps({**asyncio.run(main()), **_blocks.stats()}))
    """)
    assert out["kept"] >= 6 * (1 << 20)
    assert out["kept_bytes"] == 0 and out["kept_bytes_metric"] == 0
    assert out["released"] == 6
