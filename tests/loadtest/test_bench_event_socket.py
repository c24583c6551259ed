"""The socket-side KV-event intake benchmark runs on its committed recording: every batch
published by its child process is taken through the subscriber's live path."""

from __future__ import annotations

import json
import sys

import pytest

from loadtest import bench_event_intake, bench_event_socket
from tests.loadtest.test_bench_event_intake import RECORDING


def test_the_recording_goes_through_a_real_socket(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["bench_event_socket", str(RECORDING), "--rounds", "1", "--gap-ms", "0", "--tag", "t"]
    monkeypatch.setattr(sys, "argv", argv)
    bench_event_socket.main()
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    recorded = len(bench_event_intake.messages(RECORDING, 1))
    assert line["tag"] == "t" and line["batches"] == recorded  # a round takes every batch
    assert line["held_after"] > 0  # the stores reached the index
    assert 0 < line["min_us"] <= line["median_us"]
