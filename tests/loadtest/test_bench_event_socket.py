"""The socket-side KV-event intake benchmark runs on its committed recording: every batch
published by its child process is taken through the subscriber's live path."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from loadtest import bench_event_socket

RECORDING = Path(__file__).resolve().parents[2] / "docs" / "h201" / "mocker_batches.msgpack"


def test_the_recording_goes_through_a_real_socket(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["bench_event_socket", str(RECORDING), "--rounds", "1", "--gap-ms", "0", "--tag", "t"]
    monkeypatch.setattr(sys, "argv", argv)
    bench_event_socket.main()
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["tag"] == "t" and line["batches"] == 526  # each round ends with every batch
    assert line["held_after"] > 0  # the stores reached the index
    assert 0 < line["min_us"] <= line["median_us"]
