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
import json, random, resource
from kinference import heap
from kinference.native import _blocks
heap.fix_mmap_threshold()
MIB = 1 << 20
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
        import threading
        _blocks.install(256 * 1024, 4 * MIB, 3 * MIB)
        bad = []
        def churn(seed: int) -> None:
            rng = random.Random(seed)
            held = []
            for step in range(80):
                size = rng.randrange(200_000, 5 * MIB)
                fill = (seed * 31 + step) % 251
                held.append((bytes([fill]) * size, fill))
                if len(held) > 3 or rng.random() < 0.5:
                    data, want = held.pop(rng.randrange(len(held)))
                    if data.count(want) != len(data):
                        bad.append(seed)
        threads = [threading.Thread(target=churn, args=(seed,)) for seed in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
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
