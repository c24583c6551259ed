"""The precise parts' CPU bench runs end to end on small prompts: every part of the
workloads reported, the events and the background rest among them."""

from __future__ import annotations

import pytest

from loadtest import bench_precise_cpu


@pytest.mark.timeout(300)
def test_every_part_of_both_workloads_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    workloads = ("cold", "chat", bench_precise_cpu.INTERLEAVED)
    args = ["--size", "4096", "--rounds", "1", "--workloads", ",".join(workloads)]
    assert bench_precise_cpu.main(args) == 0
    report = capsys.readouterr().out
    for workload in workloads:
        for part in ("tokenization at Pick", "match", "routed and released", "events decoded"):
            assert f"| {workload}: {part} | " in report
        assert f"| **{workload}, all parts** |" in report
    for workload in ("cold", "chat"):  # x16's turns leave no rest at this size
        assert f"| {workload}: the rest in the background | " in report
        assert f"| {workload}: events applied | " in report
