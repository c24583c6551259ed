"""Blocks kept filled ahead of need (`_blocks.fill_ahead`, started by `heap.start_serving`):
a burst larger than anything freed before still finds its pages there. Each case runs in an
interpreter of its own (`test_blocks._run`), with the picker's fixed mmap threshold."""

from __future__ import annotations

import textwrap

from tests.native.test_blocks import _run, pytestmark  # noqa: F401  (skipped where not built)

_WAIT = """
import time
def kept_at_least(nbytes, within=30.0):  # the filler works beside us: poll, to a deadline
    deadline = time.monotonic() + within
    while _blocks.stats()["kept_bytes"] < nbytes and time.monotonic() < deadline:
        time.sleep(0.001)
    return _blocks.stats()["kept_bytes"]
BLOCK = MIB + 64 * 1024  # a 1 MiB object's mapping: its 64 KiB class
"""


def _ahead(body: str) -> dict[str, object]:
    return _run(_WAIT + textwrap.dedent(body))


def test_a_first_burst_finds_its_pages_filled_ahead() -> None:
    """Before: nothing freed yet, so 16 `bytes` of 1 MiB faulted ~4,100 pages in where they
    were made; the filler thread has mapped and populated them before they are asked for."""
    out = _ahead("""
        assert heap.cache_large_blocks() and heap.fill_ahead()
        filled = kept_at_least(16 * BLOCK)
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        held = [bytes([i]) * MIB for i in range(16)]
        faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before
        refilled = kept_at_least(16 * BLOCK)  # taken: the thread fills the class again
        intact = all(h.count(i) == MIB for i, h in enumerate(held))
        print(json.dumps({"filled": filled, "faults": faults, "refilled": refilled,
                          "intact": intact, **_blocks.stats()}))
    """)
    assert out["filled"] == 16 * (1 << 20) + 16 * 64 * 1024
    assert out["faults"] < 100
    assert out["refilled"] == out["filled"] and out["intact"]
    assert out["reused"] >= 16 and out["filled_ahead"] >= 32


def test_filled_ahead_blocks_stay_within_the_cap_and_are_spared_by_the_idle_return() -> None:
    """The cap bounds them like any kept block; `release` unmaps the other kept blocks (here
    a 2 MiB one) but not the `count` newest of the class filled ahead."""
    out = _ahead("""
        _blocks.install(256 * 1024, 4 * MIB, 6 * MIB)
        assert _blocks.fill_ahead(MIB, 16)
        kept_at_least(5 * BLOCK)  # what the 6 MiB cap leaves room for
        only = kept_at_least(6 * BLOCK, within=0.5)  # never more: waits out its deadline
        print(json.dumps({"only": only}))
    """)
    assert out["only"] == 5 * ((1 << 20) + 64 * 1024)
    out = _ahead("""
        assert heap.cache_large_blocks() and _blocks.fill_ahead(MIB, 2)
        kept_at_least(2 * BLOCK)
        other = b"o" * (2 * MIB)
        del other
        released = _blocks.release(0.0)
        print(json.dumps({"unmapped_bytes": released, **_blocks.stats()}))
    """)
    assert out["unmapped_bytes"] == 2 * (1 << 20) + 64 * 1024  # the 2 MiB block alone
    assert out["kept_bytes"] == 2 * ((1 << 20) + 64 * 1024)


def test_filling_ahead_needs_the_cache_and_a_class_it_serves() -> None:
    out = _run("""
        before = heap.fill_ahead()
        heap.cache_large_blocks()
        outside = _blocks.fill_ahead(8 * MIB, 1)
        try:
            _blocks.fill_ahead(MIB, -1)
            refused = False
        except ValueError:
            refused = True
        print(json.dumps({"before": before, "outside": outside, "refused": refused}))
    """)
    assert out == {"before": False, "outside": False, "refused": True}


def test_a_child_forked_beside_the_filler_makes_large_objects() -> None:
    """The filler thread is not in a forked child; the child's blocks work as ever."""
    out = _ahead("""
        import os
        heap.cache_large_blocks()
        heap.fill_ahead()
        codes = []
        for _ in range(10):
            pid = os.fork()
            if pid == 0:
                made = [b"k" * MIB for _ in range(20)]
                os._exit(0 if all(len(m) == MIB for m in made) else 1)
            codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
        print(json.dumps({"codes": sorted(set(codes)), "kept": kept_at_least(16 * BLOCK)}))
    """)
    assert out["codes"] == [0]
    assert out["kept"] == 16 * ((1 << 20) + 64 * 1024)
