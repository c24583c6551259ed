"""The precise parts' CPU bench runs end to end on small prompts: every part of both
workloads reported, the events and the background rest among them."""

from __future__ import annotations

import pytest

from loadtest import bench_precise_cpu


@pytest.mark.timeout(300)
def test_every_part_of_both_workloads_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_precise_cpu.main(["--size", "4096", "--rounds", "1"]) == 0
    report = capsys.readouterr().out
    for workload in ("cold", "chat"):
        for part in (
            "tokenization at Pick",
            "match",
            "routed and released",
            "the rest in the background",
            "events decoded",
            "events applied",
        ):
            assert f"| {workload}: {part} | " in report
        assert f"| **{workload}, all parts** |" in report
