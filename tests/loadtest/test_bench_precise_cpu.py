"""The precise parts' CPU bench runs end to end on small prompts: every part of the
workloads reported, the events and the background rest among them."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest import bench_precise_cpu
from loadtest.tiny_model import write_model


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


@pytest.mark.timeout(300)
def test_the_dynamo_workload_is_replayed_through_the_preparer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The routing bench's Dynamo bodies (a model of the tests' own here), each Pick's blocks
    checked against the whole prompt's by the replay: every kind of body reported."""
    write_model(tmp_path)
    args = ["--workloads", "dynamo", "--rounds", "1", "--requests", "16", "--seeds", "1"]
    assert bench_precise_cpu.main([*args, "--model-dir", str(tmp_path)]) == 0
    report = capsys.readouterr().out
    for name in ("dynamo", "dynamo chat-first", "dynamo chat-next", "dynamo doc"):
        for part in ("tokenization at Pick", "the rest in the background"):
            assert f"| {name}: {part} | " in report
